"""An agent run's event stream on a real server: heartbeats follow ``sse_heartbeat_seconds``,
log windows never split a UTF-8 character (also across 64 KiB windows and resumes), and a
resume by ``Last-Event-ID`` continues with no gap and no repeat."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run

from serverproc import ServerProcess, read_sse

LOG_BYTES = 200_000  # three 64 KiB windows and more


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = agent_server(tmp_path_factory.mktemp("runstream"), "none", sse_heartbeat_seconds=0.3)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with api(server) as c:
        yield c


def events_of(client: httpx.Client, run_id: str, last_event_id: str | None = None) -> list[Any]:
    headers = {"last-event-id": last_event_id} if last_event_id else {}
    with client.stream("GET", f"/runs/{run_id}/events", headers=headers) as reply:
        assert reply.status_code == 200
        return read_sse(reply.iter_lines())


def log_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["data"]["content"] for e in events if e["event"] == "log")


def check_log_events(events: list[dict[str, Any]], start: int = 0) -> None:
    """Log events tile the file: each starts where the last ended, its id names its end."""
    offset = start
    for event in (e for e in events if e["event"] == "log"):
        data = event["data"]
        assert data["startOffset"] == offset, data
        assert data["nextOffset"] == offset + len(data["content"].encode())
        assert int(event["id"]) & ((1 << 40) - 1) == data["nextOffset"]
        assert "\ufffd" not in data["content"]
        offset = data["nextOffset"]


def test_quiet_run_stream_sends_heartbeats_at_the_setting(client: httpx.Client) -> None:
    run = create_run(client, new_session(client), "sleep 2", package="probe")
    seen: list[tuple[float, str]] = []
    with client.stream("GET", f"/runs/{run['id']}/events") as reply:
        for line in reply.iter_lines():
            seen.append((time.monotonic(), line))
    beats = [at for at, line in seen if line.startswith(": heartbeat")]
    assert len(beats) >= 3, seen  # 2 s of sleep at 0.3 s; the old fixed 15 s sent none
    gaps = [later - earlier for earlier, later in zip(beats, beats[1:], strict=False)]
    assert max(gaps) < 1.0, gaps
    assert read_sse(line for _, line in seen)[-1]["event"] == "end"


def test_multibyte_log_across_windows_never_splits_a_character(client: httpx.Client) -> None:
    run = create_run(client, new_session(client), str(LOG_BYTES), package="chatter")
    live = events_of(client, run["id"])  # opened while the run writes: windows of a live log
    assert wait_run(client, run["id"])["state"] == "succeeded"
    expected = wait_file(client, run["id"], "chatter.txt").decode("utf-8")
    assert len(expected.encode()) >= LOG_BYTES
    for events in (live, events_of(client, run["id"])):
        check_log_events(events)
        assert log_of(events) == expected
        assert events[-1]["event"] == "end"
    done = events_of(client, run["id"])
    logs = [e for e in done if e["event"] == "log"]
    assert len(logs) >= 3  # the finished log came in 64 KiB windows
    # resume after each log event: the rest continues exactly where that one ended
    for index in range(len(done) - 1):
        rest = events_of(client, run["id"], done[index]["id"])
        assert [e["data"] for e in rest] == [e["data"] for e in done[index + 1 :]]
    middle = logs[1]
    rest = events_of(client, run["id"], middle["id"])
    check_log_events(rest, middle["data"]["nextOffset"])
    assert log_of(done[: done.index(middle) + 1]) + log_of(rest) == expected


def test_resume_from_inside_a_character_moves_to_the_next_one(client: httpx.Client) -> None:
    run = create_run(client, new_session(client), "70000", package="chatter")
    assert wait_run(client, run["id"])["state"] == "succeeded"
    expected = wait_file(client, run["id"], "chatter.txt")
    inside = expected.index("😀".encode()) + 1  # a hand-made id pointing into a character
    rest = events_of(client, run["id"], str(inside))
    logs = [e for e in rest if e["event"] == "log"]
    assert logs[0]["data"]["startOffset"] == inside + 3
    check_log_events(rest, inside + 3)
    assert log_of(rest) == expected[inside + 3 :].decode("utf-8")


def test_run_stream_ids_are_bounded(client: httpx.Client, server: ServerProcess) -> None:
    run = create_run(client, new_session(client), "answer ok", package="probe")
    wait_run(client, run["id"])
    largest = ((1 << 63) << 40) - 1
    assert events_of(client, run["id"], str(largest))[-1]["event"] == "end"
    for bad in (str(largest + 1).encode(), "²".encode(), b"-1", b"1" * 40):
        reply = client.get(f"/runs/{run['id']}/events", headers={b"last-event-id": bad})
        assert reply.status_code == 400, (bad, reply.text)
        assert str(largest) in reply.json()["error"]["message"]


def test_log_tail_without_newline_waits_for_its_line_while_running(tmp_path: Path) -> None:
    """The whole-lines rule of a live log, through the one reader."""
    from runyard.api.sse import next_log_window

    log = tmp_path / "run.log"
    log.write_bytes("first é\nsecond €".encode() + "😀".encode()[:2])
    chunk = next_log_window(log, 0, 65536, whole_lines=True)
    assert chunk is not None and chunk.content == "first é\n"
    assert next_log_window(log, chunk.next_offset, 65536, whole_lines=True) is None
    ended = next_log_window(log, chunk.next_offset, 65536)
    assert ended is not None and ended.content == "second €"  # never half a character
