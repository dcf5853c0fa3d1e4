"""Server-Sent Events, the one place they are framed: events, ids, resume, heartbeats, logs.

Both streams use it: the Job API's ``stream_task`` (:mod:`runyard.api.streaming`) and an
agent run's ``GET /api/v1/runs/{id}/events`` (:mod:`runyard.api.run_stream`).

- **Framing**: :func:`format_event` writes ``event:``, ``id:`` and one ``data:`` line of
  compact JSON; :data:`HEARTBEAT` is a comment line.
- **Ids and resume**: an event id is ``position << 40 | log_offset``: where the stream stands
  in its run's log (byte offset, below 1 TiB) and in its other record (a stream-specific
  position: for a task the run tag and the events-file offset, for an agent run the journal
  position). :func:`parse_event_id` reads a ``Last-Event-ID`` back, refusing anything the
  stream could not have sent.
- **Heartbeat**: :class:`Heartbeat` paces the comment line by ``sse_heartbeat_seconds``.
- **Logs**: :func:`next_log_window` reads the next window of a run's log through
  :func:`runyard.workspace.logs.read_log_window`, which never splits a UTF-8 character, so
  an offset in an id is always on a character boundary.
- **Gauge**: :func:`sse_client` counts open streams for ``/metrics``: the metrics middleware
  puts the request's gauge into :data:`current_gauge`, and a stream's body iterator runs in
  a task that inherits that context. Outside a server it does nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from starlette.responses import StreamingResponse

from runyard.workspace.logs import TaskLogChunk, read_log_window

LOG_SHIFT = 40  # log byte offsets below 1 TiB
LOG_MASK = (1 << LOG_SHIFT) - 1
HEARTBEAT = b": heartbeat\n\n"
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}

current_gauge: ContextVar[Any] = ContextVar("runyard_sse_clients", default=None)


def format_event(kind: str, data: Any, event_id: int | str | None = None) -> bytes:
    """One event: ``event:``, ``id:`` (when given) and one ``data:`` line of JSON."""
    lines = [f"event: {kind}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append("data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")))
    return ("\n".join(lines) + "\n\n").encode()


def event_id(position: int, log_offset: int) -> int:
    return (position << LOG_SHIFT) | log_offset


def id_rule(max_position: int) -> str:
    """The message a refused ``Last-Event-ID`` gets (it names the stream's largest id)."""
    largest = event_id(max_position, LOG_MASK)
    return f"Last-Event-ID must be an event id of this stream: 0 to {largest}"


def parse_event_id(value: str | None, max_position: int) -> tuple[int, int]:
    """``(position, log_offset)`` of a ``Last-Event-ID``; ``(0, 0)`` when there is none.

    ValueError unless it is an id the stream could send (``position <= max_position``).
    """
    text = (value or "").strip()
    if not text:
        return 0, 0
    largest = event_id(max_position, LOG_MASK)
    # ASCII digits only ("²".isdigit() is true) and few of them: int() refuses 5,000 digits
    if not (text.isascii() and text.isdigit() and len(text) <= len(str(largest))):
        raise ValueError(id_rule(max_position))
    number = int(text)
    if number > largest:
        raise ValueError(id_rule(max_position))
    return number >> LOG_SHIFT, number & LOG_MASK


class Heartbeat:
    """When a quiet stream owes its client a heartbeat comment (every ``every`` seconds)."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.last_sent = time.monotonic()

    def sent(self) -> None:
        """Something went out: the silence starts again."""
        self.last_sent = time.monotonic()

    def wait_time(self, poll: float) -> float:
        """How long to wait for a change: ``poll`` at most, never past the next heartbeat."""
        return min(poll, max(0.0, self.last_sent + self.every - time.monotonic()))

    def due(self) -> bytes | None:
        """:data:`HEARTBEAT` if the stream was silent for ``every`` seconds (and reset)."""
        if time.monotonic() - self.last_sent < self.every:
            return None
        self.sent()
        return HEARTBEAT


def next_log_window(
    path: Path | str | None, offset: int, limit: int, whole_lines: bool = False
) -> TaskLogChunk | None:
    """The log's next window from ``offset``, or None when there is nothing new to send.

    Never splits a UTF-8 character. With ``whole_lines`` a window that reaches the end of
    the file stops after its last newline (a line still being written waits for its end);
    a window that does not reach the end is sent whole. None also for an offset past the
    end (a rewritten log), where a stream has nothing it could continue.
    """
    chunk = read_log_window(path, offset, limit, lines=whole_lines)
    if chunk.reset or chunk.next_offset <= offset:
        return None
    return chunk


def sse_response(stream: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(stream, media_type="text/event-stream", headers=SSE_HEADERS)


@contextmanager
def sse_client(stream: str) -> Iterator[None]:
    """Count the block as one open stream of kind ``stream`` (``task`` or ``run``)."""
    gauge = current_gauge.get()
    if gauge is None:
        yield
        return
    child = gauge.labels(stream=stream)
    child.inc()
    try:
        yield
    finally:
        child.dec()
