"""``metric`` events on a task's event stream (``POST /jobs/stream_task/events``).

A client that asks for them with ``?metrics=true`` gets, beside ``progress`` and ``log``,
one ``metric`` event per batch of points the run appended to its ``metrics.jsonl``::

    event: metric
    id: 1180591620717411303424.512
    data: {"kind":"metric","task_id":"base#train#x","run_id":"…","points":[{"name":"loss",
           "step":3,"value":0.25,"time":1765140000.123}, …]}

They are opt-in because AxonX 0.2.2's client refuses a stream event of a kind it does not
know: a stream without the parameter is as before. The id of every event of such a stream
is the stream's usual id, a dot, and the byte offset in ``metrics.jsonl`` the stream has
sent up to, so ``Last-Event-ID`` resumes the points too (an id without the dot resumes
them from the start). Values are in wire form: NaN and the infinities are strings.

The file is read as untrusted (:func:`runyard.tracking.reading.read_new_points`): from a
sandboxed run's ``.sandbox/`` folder while it runs, from the task folder after.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runyard.errors import BadEventId, BadStreamQuery
from runyard.runtime.sandboxfiles import SANDBOX_DIR
from runyard.tracking.points import METRICS_FILE, point_json
from runyard.tracking.reading import read_new_points

MAX_POINTS_PER_EVENT = 1000
MAX_EVENTS_PER_READ = 50  # a long file is sent over several reads, never held whole
MAX_OFFSET_DIGITS = 15  # a metrics file below 1 PB
SANDBOXED = f"{SANDBOX_DIR}/{METRICS_FILE}"


def wants_metrics(query: Mapping[str, str]) -> bool:
    """Whether the request asks for metric events (``?metrics=true``, ``1`` too)."""
    value = query.get("metrics", "false").lower()
    if value not in ("true", "1", "false", "0"):
        raise BadStreamQuery(f"metrics must be true or false, not {value[:20]!r}")
    return value in ("true", "1")


def split_event_id(value: str | None) -> tuple[str | None, int]:
    """``(the usual id, metrics offset)`` of a ``Last-Event-ID`` of a stream with metric
    events; :class:`~runyard.errors.BadEventId` for an offset that is not one we send."""
    if value is None or "." not in value:
        return value, 0
    usual, offset = value.rsplit(".", 1)
    if not (offset.isascii() and offset.isdigit() and len(offset) <= MAX_OFFSET_DIGITS):
        raise BadEventId("Last-Event-ID must be an event id of this stream: <id>.<offset>")
    return usual, int(offset)


def stream_id(usual: int, metrics_offset: int | None) -> int | str:
    """The id of an event: the usual one, with the metrics offset when the stream has it."""
    return usual if metrics_offset is None else f"{usual}.{metrics_offset}"


def new_metric_events(
    task_dir: Path, task_id: str, run_id: str, offset: int
) -> list[tuple[dict[str, Any], int]]:
    """The ``metric`` events for the points written from ``offset`` on: each event's data
    and the offset after its last point (the one its id carries)."""
    relative = SANDBOXED if (task_dir / SANDBOX_DIR).is_dir() else METRICS_FILE
    events: list[tuple[dict[str, Any], int]] = []
    while len(events) < MAX_EVENTS_PER_READ:
        points, after = read_new_points(
            task_dir, offset, relative=relative, max_points=MAX_POINTS_PER_EVENT)
        if after == offset and relative == SANDBOXED:  # adopted into the task folder by now
            relative = METRICS_FILE
            continue
        if after == offset:
            return events
        offset = after
        if points:
            data = {"kind": "metric", "task_id": task_id, "run_id": run_id,
                    "points": [point_json(point) for point in points]}
            events.append((data, after))
    return events
