"""A run's live events as Server-Sent Events: ``state``, ``log`` and one final ``end``.

``state`` events replay the run's journal (queued, running, its terminal state); ``log``
events carry whole lines of its output as they are written; ``end`` carries the finished
RunRecord. Every event has an ``id`` that encodes the journal position and the log byte
offset, so a client reconnecting with ``Last-Event-ID`` resumes with no gap and no repeat.
A comment line is sent as a heartbeat when nothing else was sent for 15 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runyard.agents.errors import BadRequest
from runyard.agents.models import Run, RunEvent, to_wire
from runyard.agents.notify import ChangeSignal
from runyard.api.sse_gauge import sse_client

HEARTBEAT_SECONDS = 15.0
LOG_POLL_SECONDS = 0.2
LOG_WINDOW = 64 * 1024
LOG_SHIFT = 40
MAX_EVENT_ID = ((1 << 63) << LOG_SHIFT) - 1  # journal positions are SQLite integers
MAX_EVENT_ID_DIGITS = len(str(MAX_EVENT_ID))
LAST_EVENT_ID_RULE = f"Last-Event-ID must be an event id of this stream: 0 to {MAX_EVENT_ID}"


def format_event(kind: str, data: Any, event_id: int) -> bytes:
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"event: {kind}\nid: {event_id}\ndata: {payload}\n\n".encode()


@dataclass
class RunCursor:
    seq: int = 0
    log_offset: int = 0

    @classmethod
    def parse(cls, last_event_id: str | None) -> RunCursor:
        if last_event_id is None or not last_event_id.strip():
            return cls()
        value = last_event_id.strip()
        # ASCII digits only ("²".isdigit() is true) and few of them: int() refuses 5,000
        # digits, and a journal position past SQLite's integers cannot be looked up
        if not (value.isascii() and value.isdigit() and len(value) <= MAX_EVENT_ID_DIGITS):
            raise BadRequest(LAST_EVENT_ID_RULE)
        number = int(value)
        if number > MAX_EVENT_ID:
            raise BadRequest(LAST_EVENT_ID_RULE)
        return cls(number >> LOG_SHIFT, number & ((1 << LOG_SHIFT) - 1))

    @property
    def event_id(self) -> int:
        return (self.seq << LOG_SHIFT) | self.log_offset


def read_log_lines(path: Path, offset: int, final: bool) -> tuple[str, int] | None:
    """Whole lines from ``offset`` (everything left once ``final``): ``(text, next_offset)``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.pread(fd, LOG_WINDOW, offset)
    finally:
        os.close(fd)
    if not data:
        return None
    if not final and len(data) < LOG_WINDOW:
        cut = data.rfind(b"\n")
        if cut < 0:
            return None
        data = data[: cut + 1]
    return data.decode("utf-8", "replace"), offset + len(data)


@dataclass
class RunStreamSource:
    """What a stream reads: the run, its journal, its log, and the change signal."""

    get_run: Callable[[], Run]
    get_events: Callable[[int], list[RunEvent]]
    log_path: Path
    signal: ChangeSignal


async def run_events(source: RunStreamSource, cursor: RunCursor) -> AsyncIterator[bytes]:
    with sse_client("run"):
        async with aclosing(_run_events(source, cursor)) as events:
            async for chunk in events:
                yield chunk


async def _run_events(source: RunStreamSource, cursor: RunCursor) -> AsyncGenerator[bytes, None]:
    last_sent = time.monotonic()
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
            last_sent = time.monotonic()
            continue
        await source.signal.wait(LOG_POLL_SECONDS)
        if time.monotonic() - last_sent >= HEARTBEAT_SECONDS:
            yield b": heartbeat\n\n"
            last_sent = time.monotonic()


def _drain(source: RunStreamSource, cursor: RunCursor, final: bool) -> list[bytes]:
    out: list[bytes] = []
    for event in source.get_events(cursor.seq):
        cursor.seq = event.seq
        data = {**event.data, "seq": event.seq, "runId": event.run_id}
        out.append(format_event(event.kind, data, cursor.event_id))
    while (found := read_log_lines(source.log_path, cursor.log_offset, final)) is not None:
        text, next_offset = found
        data = {"content": text, "startOffset": cursor.log_offset, "nextOffset": next_offset}
        cursor.log_offset = next_offset
        out.append(format_event("log", data, cursor.event_id))
        if len(out) > 64:
            break
    return out
