"""Server-Sent Events for the Job API: ``progress``, ``log`` and one final ``result``.

Every event carries a numeric ``id`` (framed by :mod:`runyard.api.sse`) that encodes where
the stream stands in the run's two files and which run it follows:
``run_tag << 80 | events_offset << 40 | log_offset`` (``run_tag`` is the first 32 bits of
the run id): the :mod:`~runyard.api.sse` position is ``run_tag << 40 | events_offset``. A
client reconnecting with ``Last-Event-ID`` continues with no gap and no repeat; if the task
was rerun meanwhile, the stream ends at once with a failed ``result`` instead of mixing two
runs. An id whose run tag is 0 (a client that built it from offsets alone) follows the
current run. A comment line is sent as a heartbeat when nothing else was sent for
``sse_heartbeat_seconds``.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool

from runyard.agents.models import RunScope
from runyard.api.envelope import error_answer
from runyard.api.event_data import log_data, progress_data, result_data
from runyard.api.jobs import current_status
from runyard.api.metric_events import new_metric_events, split_event_id, stream_id
from runyard.api.scopes import scrub
from runyard.api.services import Services
from runyard.api.sse import (
    LOG_SHIFT,
    Heartbeat,
    event_id,
    format_event,
    next_log_window,
    parse_event_id,
    sse_client,
)
from runyard.changes import ChangeHub
from runyard.errors import BadEventId
from runyard.runtime.submitters import log_to_read
from runyard.workspace.events import read_events
from runyard.workspace.logs import MAX_LIMIT
from runyard.workspace.records import TaskStatus

EVENTS_MASK = (1 << LOG_SHIFT) - 1  # events-file offsets below 1 TiB
MAX_POSITION = (1 << (LOG_SHIFT + 32)) - 1  # run tags are 32 bits


def parse_last_event_id(value: str | None, metrics: bool = False) -> StreamCursor:
    """The position a Last-Event-ID names; :class:`~runyard.errors.BadEventId` (answered
    by the error table) unless it is an id we could send. With ``metrics`` the stream
    sends ``metric`` events too and its ids carry their offset (api/metric_events.py)."""
    metrics_offset = None
    if metrics:
        value, metrics_offset = split_event_id(value)
    try:
        position, log_offset = parse_event_id(value, MAX_POSITION)
    except ValueError as exc:
        raise BadEventId(str(exc)) from exc
    return StreamCursor(position & EVENTS_MASK, log_offset, position >> LOG_SHIFT, metrics_offset)


def run_tag(run_id: str) -> int:
    try:
        return int(run_id[:8], 16)
    except ValueError:
        return zlib.crc32(run_id.encode())


@dataclass
class StreamCursor:
    events_offset: int = 0
    log_offset: int = 0
    run_tag: int = 0
    metrics_offset: int | None = None  # None: the stream sends no metric events

    @property
    def event_id(self) -> int | str:
        usual = event_id((self.run_tag << LOG_SHIFT) | self.events_offset, self.log_offset)
        return stream_id(usual, self.metrics_offset)


async def single_result(
    answer: Any, success: bool, metadata: dict[str, Any] | None = None
) -> AsyncIterator[bytes]:
    yield format_event("result", result_data(answer, success, metadata), 0)


async def stream_task_events(
    services: Services,
    hub: ChangeHub,
    task_id: str,
    poll_interval: float,
    cursor: StreamCursor,
    scope: RunScope | None = None,
) -> AsyncIterator[bytes]:
    """Progress and log events of the run current at the start, then its final result.

    A run token (``scope``) follows only its session's tasks, as :func:`current_status`.
    """
    try:
        status = await run_in_threadpool(current_status, services, task_id, scope)
    except Exception as exc:
        answer = scrub(services, error_answer(exc), scope)
        yield format_event("result", result_data(answer, False), cursor.event_id)
        return
    pinned = status.run_id
    if cursor.run_tag not in (0, run_tag(pinned)):
        message = (
            f"KeyError: the run this stream followed is no longer the current run of {task_id}"
        )
        yield format_event("result", result_data(message, False), cursor.event_id)
        return
    cursor.run_tag = run_tag(pinned)
    heartbeat = Heartbeat(services.settings.sse_heartbeat_seconds)
    events_path = services.workspace.events_path(task_id)
    # the pinned run's log, derived from its ids (never a path its status names)
    log_path = await run_in_threadpool(log_to_read, services.workspace, status)
    run = (services.workspace.task_dir(task_id), task_id, pinned)
    with hub.subscribe(task_id) as sub, sse_client("task"):
        while True:
            for chunk in await run_in_threadpool(_drain, events_path, log_path, cursor, run):
                yield chunk
                heartbeat.sent()
            if status.terminal:
                break
            changed = await sub.wait(heartbeat.wait_time(poll_interval))
            if not changed and (beat := heartbeat.due()) is not None:
                yield beat
            latest = await run_in_threadpool(_status_or_none, services, task_id, scope)
            if latest is None or latest.run_id != pinned:
                gone = "deleted" if latest is None else f"replaced by run {latest.run_id}"
                message = f"KeyError: run {pinned} of {task_id} was {gone} before it ended"
                yield format_event("result", result_data(message, False), cursor.event_id)
                return
            status = latest
    final = result_data(scrub(services, status.to_json(), scope), status.exit_code == 0)
    yield format_event("result", final, cursor.event_id)


def _status_or_none(services: Services, task_id: str, scope: RunScope | None) -> TaskStatus | None:
    try:
        return current_status(services, task_id, scope)
    except KeyError:
        return None


def _drain(
    events_path: Any, log_path: str, cursor: StreamCursor, run: tuple[Any, str, str]
) -> list[bytes]:
    out: list[bytes] = []
    events, next_offset = read_events(events_path, cursor.events_offset)
    for index, (_, event) in enumerate(events):
        # a line ends where the next readable one starts (unreadable lines are skipped)
        ends = events[index + 1][0] if index + 1 < len(events) else next_offset
        cursor.events_offset = ends
        if event.get("kind") == "progress":
            out.append(format_event("progress", progress_data(event), cursor.event_id))
    cursor.events_offset = next_offset
    while (chunk := next_log_window(log_path, cursor.log_offset, MAX_LIMIT)) is not None:
        cursor.log_offset = chunk.next_offset
        data = log_data(chunk.model_dump(mode="json"))
        out.append(format_event("log", data, cursor.event_id))
        if not chunk.has_more_after:
            break
    if cursor.metrics_offset is not None:
        for data, after in new_metric_events(*run, cursor.metrics_offset):
            cursor.metrics_offset = after
            out.append(format_event("metric", data, cursor.event_id))
    return out
