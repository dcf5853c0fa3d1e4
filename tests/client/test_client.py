"""The typed Python client against a real server, including a stream cut off mid-way."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from pydantic import ValidationError

from runyard.client import AsyncClient, Client, LogEvent, ProgressEvent, ResultEvent
from runyard.client.calls import adapter, status_call
from runyard.errors import JobFailed, RequestInvalid, ServerUnreachable, Unauthorized
from runyard.workspace.records import TaskStatus
from serverproc import ServerProcess, start_server
from tcpproxy import Proxy

SCRIPT = "for i in 1 2 3 4 5 6; do echo line-$i; sleep 0.1; done"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the module: each test submits and reads tasks of its own."""
    proc = start_server(tmp_path_factory.mktemp("client") / "srv")
    try:
        yield proc
    finally:
        proc.stop()


def test_typed_methods(server: ServerProcess) -> None:
    with Client(server.url, server.token) as client:
        assert client.health() is True
        handle = client.submit("demo", name="typed", x=2, y=5)
        status = client.wait_task(handle.task_id, handle.run_id, poll_interval=0.05)
        assert isinstance(status, TaskStatus) and status.result["result"] == 7
        assert client.status("base#demo#typed") == status
        assert "Demo result=7" in client.read_task_log("base#demo#typed", offset=0).content
        assert client.get_task_graph("base#demo#typed").selected_id == "base#demo#typed"
        assert client.get_task_context("base#demo#typed").metadata_exists is True
        assert "base#demo#typed" in client.list_task_ids()
        assert [s.task_id for s in client.list_task_statuses(limit=1)] == ["base#demo#typed"]
        assert {d.name for d in client.list_installed_task_definitions()} >= {"demo", "command"}
        assert client.get_task_definition("demo").task_type == "base"
        failed = client.wait_task(*_ids(client.submit("demo", x=1, y=1, fail=True)), poll_interval=0.05)
        assert failed.state == "failed"
        assert client.cancel("base#demo#typed") is False
        assert client.delete_tasks(["base#demo#typed"]) == ["base#demo#typed"]
        with pytest.raises(JobFailed) as info:
            client.status("base#demo#typed")
        assert info.value.error_type == "KeyError"
        with pytest.raises(JobFailed, match="Unknown Task"):
            client.submit("nope")
        with pytest.raises(RequestInvalid):
            client.read_task_log("base#demo#x", limit=5)


def _ids(handle: object) -> tuple[str, str]:
    return handle.task_id, handle.run_id  # type: ignore[attr-defined]


def test_async_client(server: ServerProcess) -> None:
    async def scenario() -> list[str]:
        async with AsyncClient(server.url, server.token) as client:
            handle = await client.submit("command", name="async", command=SCRIPT, shell=True)
            kinds = [event.kind async for event in client.stream(handle.task_id, poll_interval=0.05)]
            status = await client.status(handle.task_id)
            assert status.state == "succeeded"
            return kinds

    # in a thread of its own: a browser fixture may hold this thread's event loop
    with ThreadPoolExecutor(1) as pool:
        kinds = pool.submit(asyncio.run, scenario()).result(timeout=60)
    assert kinds[-1] == "result" and "log" in kinds and "progress" in kinds


def test_unreachable_and_unauthorized(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with Client(f"http://127.0.0.1:{port}") as client, pytest.raises(ServerUnreachable):
        client.list_task_ids()
    from serverproc import start_server

    srv = start_server(tmp_path / "auth", token="tok")
    try:
        with Client(srv.url, "wrong") as client, pytest.raises(Unauthorized):
            client.list_task_ids()
        with Client(srv.url, "tok") as client:
            assert client.list_task_ids() == []
    finally:
        srv.stop()


@pytest.fixture
def proxy(server: ServerProcess) -> Iterator[Proxy]:
    cutting = Proxy(int(server.url.rsplit(":", 1)[1]), cut_first_after=900)
    yield cutting
    cutting.stop()


def test_stream_resumes_after_a_cut(server: ServerProcess, proxy: Proxy) -> None:
    with Client(server.url, server.token) as direct:
        handle = direct.submit("command", name="cut", command=SCRIPT, shell=True)
    with Client(proxy.url, server.token) as client:
        events = list(client.stream(handle.task_id, poll_interval=0.05))
    assert proxy.connections >= 2
    assert isinstance(events[-1], ResultEvent) and events[-1].success
    ids = [e.id for e in events if not isinstance(e, ResultEvent)]
    assert len(ids) == len(set(ids))
    log = "".join(e.chunk.content for e in events if isinstance(e, LogEvent))
    assert log.count("line-1") == 1 and all(f"line-{i}\n" in log for i in range(1, 7))
    assert any(isinstance(e, ProgressEvent) for e in events)


def test_each_answer_type_is_validated_by_one_adapter_made_once(server: ServerProcess) -> None:
    """A call's answer goes through the adapter of its type, made at its first use: later
    calls reuse it (making one a call cost as much as the validation), and still refuse an
    answer of the wrong shape."""
    with Client(server.url, server.token) as client:
        handle = client.submit("demo", name="adapted", x=1, y=2)
        client.wait(handle)
        client.status(handle.task_id)
        made = adapter.cache_info().misses
        hits = adapter.cache_info().hits
        for _ in range(3):
            assert client.status(handle.task_id).result["result"] == 3
        assert adapter.cache_info().misses == made
        assert adapter.cache_info().hits == hits + 3
    assert adapter(list[TaskStatus]) is adapter(list[TaskStatus])
    bad = httpx.Response(200, json={"success": True, "answer": {"task_id": 7}})
    with pytest.raises(ValidationError):
        status_call("base#demo#adapted").parse(bad)
