"""``Client.run_pipeline`` and ``AsyncClient.run_pipeline`` against a real server: the
Python object becomes one request, parameters override defaults, a refused step raises
``RequestInvalid`` naming it with nothing made, and the run is followed to its end."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from runyard import Pipeline
from runyard.client import AsyncClient, Client
from runyard.errors import InvalidInput, NotFound, RequestInvalid
from serverproc import ServerProcess, start_server
from tcpproxy import Proxy


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("client") / "srv", token="pipe-secret")
    try:
        yield srv
    finally:
        srv.stop()


def sums() -> Pipeline:
    pipe = Pipeline("sums", params={"x": 1, "y": 2})
    first = pipe.task("demo", key="first", x=pipe.param("x"), y=pipe.param("y"))
    pipe.task("demo", key="second", x=10, y=pipe.param("y"), source_tasks=[first])
    return pipe


def test_the_client_runs_a_pipeline_with_params_and_follows_it(server: ServerProcess) -> None:
    with Client(server.url, server.token) as client:
        run = client.run_pipeline(sums(), x=40)
        assert run["params"] == {"x": 40, "y": 2} and run["state"] == "running"
        final = client.wait_pipeline_run(run["id"], timeout=60, poll_interval=0.1)
        assert final["state"] == "succeeded"
        first, second = (client.status(step["task_id"]) for step in final["steps"])
        assert first.result["result"] == 42 and second.result["result"] == 12
        assert second.started_at > first.finished_at
        assert run["id"] in {item["id"] for item in client.pipeline_runs()["items"]}
        assert client.cancel_pipeline_run(run["id"])["cancelled"] == []
        again = client.run_pipeline(sums().wire(), y=3)  # the wire form, as built
        assert again["params"] == {"x": 1, "y": 3} and again["id"] != run["id"]
        assert client.wait_pipeline_run(again["id"], timeout=60)["state"] == "succeeded"
        with pytest.raises(NotFound):
            client.pipeline_run("sums-20260101-000000-abcdef")


def test_a_refused_step_raises_and_nothing_is_made(server: ServerProcess) -> None:
    pipe = sums()
    pipe.task("demo", key="broken", x="not a number", y=1)
    with Client(server.url, server.token) as client:
        before = client.list_task_ids()
        with pytest.raises(RequestInvalid) as refused:
            client.run_pipeline(pipe)
        assert "Step broken: Invalid input for task demo" in str(refused.value)
        assert client.list_task_ids() == before
        with pytest.raises(InvalidInput, match="no parameter z"):
            client.run_pipeline(sums(), z=1)


def test_the_async_client_runs_a_pipeline(server: ServerProcess) -> None:
    async def go() -> dict[str, object]:
        async with AsyncClient(server.url, server.token) as client:
            run = await client.run_pipeline(sums(), y=5)
            return await client.wait_pipeline_run(run["id"], timeout=60, poll_interval=0.1)

    final = asyncio.run(go())
    assert final["state"] == "succeeded" and final["params"] == {"x": 1, "y": 5}


def test_the_python_api_refuses_what_the_server_would(tmp_path: Path) -> None:
    pipe = Pipeline("local")
    step = pipe.task("demo", x=1, y=1)
    with pytest.raises(InvalidInput, match="no parameter"):
        pipe.param("missing")
    with pytest.raises(InvalidInput, match="may not set task_name"):
        pipe.task("demo", task_name="fixed", x=1, y=1)
    with pytest.raises(InvalidInput, match="not a step of pipeline"):
        Pipeline("other").task("demo", depends_on=[step])
    with pytest.raises(InvalidInput, match="Invalid step key"):
        pipe.task("demo", key="a#b")
    with pytest.raises(InvalidInput, match="Invalid pipeline name"):
        Pipeline("../x")
    assert pipe.task("demo", x=2, y=2).key == "demo-2"


def test_a_lost_answer_is_asked_again_and_one_run_is_made(server: ServerProcess) -> None:
    """The first answer is cut after 10 bytes: the client sends the run again with the same
    Idempotency-Key and gets the run the first request made, not a second one."""
    port = int(server.url.rsplit(":", 1)[1])
    proxy = Proxy(port, cut_first_after=10)
    try:
        with Client(server.url, server.token) as direct:
            before = direct.pipeline_runs(limit=1000)["total"]
            with Client(proxy.url, server.token) as client:
                run = client.run_pipeline(sums(), x=7)
            runs = direct.pipeline_runs(limit=1000)
        assert proxy.connections == 2
        assert runs["total"] == before + 1 and runs["items"][0]["id"] == run["id"]
    finally:
        proxy.stop()
