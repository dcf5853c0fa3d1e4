"""A run's live events as Server-Sent Events: ``state``, ``log`` and one final ``end``.

``state`` events replay the run's journal (queued, running, its terminal state); ``log``
events carry whole lines of its output as they are written; ``end`` carries the finished
RunRecord. Every event has an ``id`` (framed by :mod:`runyard.api.sse`) whose position is
the journal position: ``seq << 40 | log_offset``, so a client reconnecting with
``Last-Event-ID`` resumes with no gap and no repeat. A comment line is sent as a heartbeat
when nothing else was sent for ``sse_heartbeat_seconds``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path

from runyard.agents.models import Run, RunEvent, to_wire
from runyard.api.agentservice import AgentService
from runyard.api.sse import (
    Heartbeat,
    event_id,
    format_event,
    next_log_window,
    parse_event_id,
    sse_client,
)
from runyard.changes import ChangeHub, Subscription

LOG_POLL_SECONDS = 0.2
LOG_WINDOW = 64 * 1024
MAX_SEQ = (1 << 63) - 1  # journal positions are SQLite integers
MAX_BATCH = 64  # events per drain, so a long log is sent while the journal is re-read


@dataclass
class RunCursor:
    seq: int = 0
    log_offset: int = 0

    @classmethod
    def parse(cls, last_event_id: str | None) -> RunCursor:
        """ValueError unless ``last_event_id`` is an id this stream could send."""
        return cls(*parse_event_id(last_event_id, MAX_SEQ))

    @property
    def event_id(self) -> int:
        return event_id(self.seq, self.log_offset)


@dataclass
class RunStreamSource:
    """What a stream reads: the run, its journal, its log, and the change hub."""

    run_id: str
    get_run: Callable[[], Run]
    get_events: Callable[[int], list[RunEvent]]
    log_path: Path
    changes: ChangeHub
    heartbeat_seconds: float


def run_stream_source(service: AgentService, run: Run) -> RunStreamSource:
    return RunStreamSource(
        run_id=run.id,
        get_run=lambda: service.runs.run(run.id),
        get_events=lambda after: service.store.run_events(run.id, after),
        log_path=service.layout.log_path(run.id),
        changes=service.changes,
        heartbeat_seconds=service.settings.sse_heartbeat_seconds,
    )


async def run_events(source: RunStreamSource, cursor: RunCursor) -> AsyncIterator[bytes]:
    with sse_client("run"), source.changes.subscribe(source.run_id) as sub:
        async with aclosing(_run_events(source, cursor, sub)) as events:
            async for chunk in events:
                yield chunk


async def _run_events(
    source: RunStreamSource, cursor: RunCursor, sub: Subscription
) -> AsyncGenerator[bytes, None]:
    heartbeat = Heartbeat(source.heartbeat_seconds)
    while True:
        run = await asyncio.to_thread(source.get_run)
        sent = False
        for chunk in await asyncio.to_thread(_drain, source, cursor, run.state.terminal):
            sent = True
            yield chunk
        if run.state.terminal and not sent:
            yield format_event("end", {"run": to_wire(run)}, cursor.event_id)
            return
        if sent:
            heartbeat.sent()
            continue
        await sub.wait(heartbeat.wait_time(LOG_POLL_SECONDS))
        if (beat := heartbeat.due()) is not None:
            yield beat


def _drain(source: RunStreamSource, cursor: RunCursor, final: bool) -> list[bytes]:
    out: list[bytes] = []
    for event in source.get_events(cursor.seq):
        cursor.seq = event.seq
        data = {**event.data, "seq": event.seq, "runId": event.run_id}
        out.append(format_event(event.kind, data, cursor.event_id))
    # a running run's log is sent in whole lines; once it ended, everything left
    while chunk := next_log_window(source.log_path, cursor.log_offset, LOG_WINDOW, not final):
        data = {
            "content": chunk.content,
            "startOffset": chunk.start_offset,
            "nextOffset": chunk.next_offset,
        }
        cursor.log_offset = chunk.next_offset
        out.append(format_event("log", data, cursor.event_id))
        if len(out) > MAX_BATCH:
            break
    return out
