"""/metrics on a real server: Prometheus text that parses, values that move, admin only."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from serverproc import ServerProcess, start_server

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run  # noqa: E402

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the module: its tests read how the counts move, not where they start."""
    proc = start_server(tmp_path_factory.mktemp("metrics") / "srv")
    try:
        yield proc
    finally:
        proc.stop()


def scrape(server: ServerProcess) -> Samples:
    reply = httpx.get(server.url + "/metrics", headers=server.headers, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain; version=")
    samples: Samples = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def labels_of(samples: Samples, name: str, label: str) -> set[str]:
    return {dict(key[1])[label] for key in samples if key[0] == name and label in dict(key[1])}


def eventually(
    server: ServerProcess, check: Callable[[Samples], bool], timeout: float = 10
) -> Samples:
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(server)
        if check(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.1)


def test_a_finished_task_moves_the_counts_and_its_duration_histogram(
    server: ServerProcess,
) -> None:
    before = scrape(server)
    assert value(before, "runyard_tasks", task_type="base", state="succeeded") == 0
    handle = server.call("submit", task="demo", x=1, y=2)["answer"]
    done = server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
    assert done["success"] is True

    def moved_by(samples: Samples, name: str, **labels: str) -> float:
        return value(samples, name, **labels) - value(before, name, **labels)

    def moved(s: Samples) -> bool:
        return moved_by(s, "runyard_task_run_duration_seconds_count", task="demo") == 1

    after = eventually(server, moved)
    assert moved_by(after, "runyard_tasks", task_type="base", state="succeeded") == 1
    assert moved_by(after, "runyard_task_run_duration_seconds_count", task="demo") == 1
    assert moved_by(after, "runyard_task_run_duration_seconds_bucket", task="demo", le="+Inf") == 1
    assert 0 < moved_by(after, "runyard_task_run_duration_seconds_sum", task="demo") < 60
    assert value(after, "runyard_queue_depth") == 0
    submits = moved_by(
        after, "runyard_http_request_duration_seconds_count",
        method="POST", route="/jobs/submit", status="200",
    )  # fmt: skip
    assert submits == 1


def test_an_open_event_stream_is_counted_until_it_closes(server: ServerProcess) -> None:
    handle = server.call("submit", task="command", command="sleep 30")["answer"]
    body = {"arguments": {"task_id": handle["task_id"], "poll_interval": 0.2}}
    try:
        with (
            server.client() as client,
            client.stream("POST", "/jobs/stream_task/events", json=body) as reply,
        ):
            assert reply.status_code == 200
            # the stream opens at once; the task may still be queued on a loaded machine
            open_now = eventually(
                server,
                lambda s: (
                    value(s, "runyard_sse_clients", stream="task") == 1
                    and value(s, "runyard_tasks", task_type="base", state="running") == 1
                ),
            )
            assert value(open_now, "runyard_sse_clients", stream="task") == 1
            assert value(open_now, "runyard_sse_clients", stream="run") == 0
            assert value(open_now, "runyard_tasks", task_type="base", state="running") == 1
        closed = eventually(server, lambda s: value(s, "runyard_sse_clients", stream="task") == 0)
        assert value(closed, "runyard_sse_clients", stream="task") == 0
    finally:
        server.call("cancel", task_id=handle["task_id"])


def test_latency_is_labelled_by_route_template_not_by_raw_path(server: ServerProcess) -> None:
    with server.client() as client:
        for n in range(3):
            reply = client.get(f"/api/v1/tasks/base%23demo%23nope-{n}/files")
            assert reply.status_code == 404
    samples = scrape(server)
    routes = labels_of(samples, "runyard_http_request_duration_seconds_count", "route")
    assert "/api/v1/tasks/{task_id}/files" in routes
    assert not any("nope" in route for route in routes), routes
    assert value(
        samples, "runyard_http_request_duration_seconds_count",
        method="GET", route="/api/v1/tasks/{task_id}/files", status="404",
    ) == 3  # fmt: skip


def test_metrics_need_the_server_token(server: ServerProcess) -> None:
    assert httpx.get(server.url + "/metrics").status_code == 401
    wrong = {"authorization": "Bearer not-the-token"}
    assert httpx.get(server.url + "/metrics", headers=wrong).status_code == 401
    foreign = {**server.headers, "host": "evil.example"}
    assert httpx.get(server.url + "/metrics", headers=foreign).status_code == 403


def test_without_auth_metrics_are_open_like_every_route(tmp_path: Path) -> None:
    open_server = start_server(tmp_path / "srv", auth=False)
    try:
        reply = httpx.get(open_server.url + "/metrics", timeout=30)
        assert reply.status_code == 200
        assert "runyard_queue_depth" in reply.text
    finally:
        open_server.stop()


def test_a_run_token_cannot_scrape_metrics_and_agent_runs_are_counted(tmp_path: Path) -> None:
    srv = agent_server(tmp_path / "srv", "none")
    try:
        with api(srv) as client:
            session_id = new_session(client)
            run = create_run(client, session_id, "token\nwait-for go\nanswer done", package="probe")
            run_token = wait_file(client, run["id"], "token").decode()
            try:
                as_run = {"authorization": f"Bearer {run_token}"}
                reply = httpx.get(srv.url + "/metrics", headers=as_run, timeout=30)
                assert reply.status_code == 401, reply.text
                with client.stream("GET", f"/runs/{run['id']}/events") as events:
                    assert events.status_code == 200
                    during = eventually(
                        srv, lambda s: value(s, "runyard_sse_clients", stream="run") == 1
                    )
                assert value(during, "runyard_sse_clients", stream="run") == 1
                assert value(during, "runyard_agent_runs", state="running") == 1
            finally:
                (srv.workspace / "agent" / "session-state" / session_id / "go").touch()
                assert wait_run(client, run["id"])["state"] == "succeeded"
        after = eventually(srv, lambda s: value(s, "runyard_agent_runs", state="succeeded") == 1)
        assert value(after, "runyard_agent_runs", state="succeeded") == 1
        assert value(after, "runyard_agent_runs", state="running") == 0
    finally:
        srv.stop()
