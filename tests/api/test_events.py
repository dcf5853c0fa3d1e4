"""Server-Sent Events of the Job API: progress, log, one result, resumable by Last-Event-ID."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from serverproc import ServerProcess, read_sse, start_server

SCRIPT = "for i in 1 2 3 4 5; do echo line-$i; sleep 0.1; done"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("events"))
    try:
        yield proc
    finally:
        proc.stop()


@contextmanager
def open_stream(
    srv: ServerProcess, task_id: str, last_event_id: str | None = None
) -> Iterator[httpx.Response]:
    headers = {"last-event-id": last_event_id} if last_event_id else {}
    body = {"arguments": {"task_id": task_id, "poll_interval": 0.05}}
    with (
        srv.client() as client,
        client.stream("POST", "/jobs/stream_task/events", json=body, headers=headers) as reply,
    ):
        yield reply


def stream_events(srv: ServerProcess, task_id: str, last_event_id: str | None = None) -> list[dict]:
    with open_stream(srv, task_id, last_event_id) as reply:
        return read_sse(reply.iter_lines())


def submit_script(srv: ServerProcess, name: str) -> dict:
    handle = srv.call("submit", task="command", task_name=name, command=SCRIPT, shell=True)
    assert handle["success"], handle
    return handle["answer"]


def test_stream_has_progress_logs_and_one_final_result(srv: ServerProcess) -> None:
    handle = submit_script(srv, "sse-full")
    with open_stream(srv, handle["task_id"]) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        events = read_sse(reply.iter_lines())
    kinds = [e["event"] for e in events]
    assert kinds[-1] == "result" and kinds.count("result") == 1
    assert "progress" in kinds and "log" in kinds
    ids = [int(e["id"]) for e in events]
    assert ids == sorted(ids)
    assert all(b > a for a, b in zip(ids[:-1], ids[1:-1], strict=False))
    log_text = "".join(e["data"]["content"] for e in events if e["event"] == "log")
    assert all(f"line-{i}" in log_text for i in range(1, 6))
    result = events[-1]["data"]
    assert result["success"] is True and result["answer"]["state"] == "succeeded"
    assert result["answer"]["run_id"] == handle["run_id"]
    progress = [e["data"] for e in events if e["event"] == "progress"]
    assert {p["name"] for p in progress} >= {"run"}
    assert all(p["kind"] == "progress" for p in progress)


def test_resume_with_last_event_id_has_no_gap_and_no_repeat(srv: ServerProcess) -> None:
    handle = submit_script(srv, "sse-resume")
    first: list[dict] = []
    with open_stream(srv, handle["task_id"]) as reply:
        for event in _iter_events(reply.iter_lines()):
            first.append(event)
            if event["event"] == "log":
                break
    rest = stream_events(srv, handle["task_id"], first[-1]["id"])
    full = stream_events(srv, handle["task_id"])
    joined = "".join(e["data"]["content"] for e in first + rest if e["event"] == "log")
    whole = "".join(e["data"]["content"] for e in full if e["event"] == "log")
    assert joined == whole
    seen = [e["id"] for e in first + rest if e["event"] != "result"]
    assert len(seen) == len(set(seen))
    progress_a = [e["data"] for e in first + rest if e["event"] == "progress"]
    progress_b = [e["data"] for e in full if e["event"] == "progress"]
    assert progress_a == progress_b


def _iter_events(lines: Iterator[str]) -> Iterator[dict]:
    buffer: list[str] = []
    for line in lines:
        buffer.append(line)
        if line == "":
            parsed = read_sse(buffer)
            buffer = []
            yield from parsed


def test_bad_last_event_id_is_422(srv: ServerProcess) -> None:
    with srv.client() as client:
        reply = client.post(
            "/jobs/stream_task/events", json={"arguments": {"task_id": "base#demo#x"}},
            headers={"last-event-id": "abc"},
        )  # fmt: skip
    assert reply.status_code == 422 and "Last-Event-ID" in reply.json()["detail"]


def test_other_jobs_answer_one_result_event(srv: ServerProcess) -> None:
    with srv.client() as client:
        reply = client.post("/jobs/list_task_ids/events", json={"arguments": {}})
    events = read_sse(reply.text.splitlines())
    assert [e["event"] for e in events] == ["result"]
    assert events[0]["data"]["success"] is True and isinstance(events[0]["data"]["answer"], list)


def test_stream_of_unknown_task_ends_with_a_failed_result(srv: ServerProcess) -> None:
    events = stream_events(srv, "base#demo#absent")
    assert [e["event"] for e in events] == ["result"]
    assert events[0]["data"]["success"] is False
    assert events[0]["data"]["answer"].startswith("KeyError: ")


def test_resume_after_a_rerun_does_not_mix_runs(srv: ServerProcess) -> None:
    first = srv.call("submit", task="command", task_name="pinned", command="echo from-first")["answer"]
    srv.call("wait_task", task_id=first["task_id"], run_id=first["run_id"], poll_interval=0.05)
    events = stream_events(srv, first["task_id"])
    assert events[-1]["data"]["answer"]["run_id"] == first["run_id"]
    position = events[-2]["id"]
    second = srv.call("submit", task="command", task_name="pinned", command="echo from-second")["answer"]
    srv.call("wait_task", task_id=second["task_id"], run_id=second["run_id"], poll_interval=0.05)
    resumed = stream_events(srv, first["task_id"], position)
    assert [e["event"] for e in resumed] == ["result"]
    assert resumed[0]["data"]["success"] is False
    assert "no longer the current run" in resumed[0]["data"]["answer"]
    fresh = stream_events(srv, first["task_id"])
    log = "".join(e["data"]["content"] for e in fresh if e["event"] == "log")
    assert "from-second" in log and "from-first" not in log
    assert fresh[-1]["data"]["answer"]["run_id"] == second["run_id"]
    # an id built from offsets alone (run tag 0) follows whatever run is current
    tail = stream_events(srv, first["task_id"], str(int(fresh[-2]["id"]) & ((1 << 80) - 1)))
    assert tail[-1]["data"]["answer"]["run_id"] == second["run_id"]
    assert not any(e["event"] == "log" for e in tail)


def test_heartbeat_comments_keep_a_quiet_stream_alive(tmp_path) -> None:  # type: ignore[no-untyped-def]
    quiet = start_server(tmp_path / "quiet", config={"sse_heartbeat_seconds": 0.3})
    try:
        handle = quiet.call("submit", task="command", task_name="quiet", command="sleep 1.2")["answer"]
        body = {"arguments": {"task_id": handle["task_id"], "poll_interval": 5}}
        with quiet.client() as client, client.stream("POST", "/jobs/stream_task/events", json=body) as reply:
            lines = list(reply.iter_lines())
        assert sum(1 for line in lines if line.startswith(": heartbeat")) >= 2
        assert read_sse(lines)[-1]["event"] == "result"
    finally:
        quiet.stop()
