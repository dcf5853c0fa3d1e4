"""The Job API's task log stream on a real server: a multi-byte log larger than one stream
window (256 KiB) comes whole, never split inside a character, and a resume by
``Last-Event-ID`` after any event continues exactly where that event ended."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from serverproc import ServerProcess, read_sse, start_server

WRITER = """
import sys
lines, total, index = [], 0, 0
while total < {size}:
    line = f"{{index:05d}}" + "x" * (index % 7) + "é€😀" * (1 + index % 5) + "\\n"
    lines.append(line)
    total += len(line.encode())
    index += 1
data = "".join(lines).encode()
open({expected!r}, "wb").write(data)
for start in range(0, len(data), 4099):  # writes that end inside characters
    sys.stdout.buffer.write(data[start : start + 4099])
    sys.stdout.buffer.flush()
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Any:
    proc = start_server(tmp_path_factory.mktemp("windows"))
    try:
        yield proc
    finally:
        proc.stop()


def stream(srv: ServerProcess, task_id: str, last_event_id: str | None = None) -> list[Any]:
    headers = {"last-event-id": last_event_id} if last_event_id else {}
    body = {"arguments": {"task_id": task_id, "poll_interval": 0.05}}
    with (
        srv.client() as client,
        client.stream("POST", "/jobs/stream_task/events", json=body, headers=headers) as reply,
    ):
        assert reply.status_code == 200
        return read_sse(reply.iter_lines())


def logs(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["event"] == "log"]


def test_multibyte_task_log_across_windows_and_resumes(srv: ServerProcess, tmp_path: Path) -> None:
    expected_path = tmp_path / "expected.txt"
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(size=600_000, expected=str(expected_path)), encoding="utf-8")
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    handle = srv.call("submit", task="command", task_name="utf8", command=command)
    assert handle["success"], handle
    task_id = handle["answer"]["task_id"]
    live = stream(srv, task_id)  # from the start, while the task writes
    assert live[-1]["data"]["success"] is True, live[-1]
    expected = expected_path.read_text(encoding="utf-8")
    done = stream(srv, task_id)
    assert len(logs(done)) >= 3  # 256 KiB windows
    for events in (live, done):
        offset = 0
        for data in logs(events):
            assert data["start_offset"] == offset and "\ufffd" not in data["content"]
            offset = data["next_offset"]
        assert "".join(d["content"] for d in logs(events)) == expected
    for index, event in enumerate(done[:-1]):
        rest = stream(srv, task_id, event["id"])
        assert [e["data"] for e in rest[:-1]] == [e["data"] for e in done[index + 1 : -1]]
        before = "".join(d["content"] for d in logs(done[: index + 1]))
        assert before + "".join(d["content"] for d in logs(rest)) == expected
