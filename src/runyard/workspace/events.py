"""``events.jsonl``: one JSON object a line, appended, replayable from any byte offset."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from runyard.faults import fault_point


def append_event(path: Path, event: dict[str, Any]) -> None:
    """Append one event line with a single ``write`` so concurrent readers never see half."""
    fault_point("events")
    line = json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_events(path: Path, offset: int = 0) -> tuple[list[tuple[int, dict[str, Any]]], int]:
    """Events from byte ``offset``: ``([(line_offset, event), ...], next_offset)``.

    A trailing line without its newline is not returned yet; invalid lines are skipped.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return [], offset
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return [], offset
        fh.seek(offset)
        data = fh.read()
    events: list[tuple[int, dict[str, Any]]] = []
    pos = 0
    while True:
        end = data.find(b"\n", pos)
        if end < 0:
            break
        try:
            event = json.loads(data[pos:end])
        except ValueError:
            event = None
        if isinstance(event, dict):
            events.append((offset + pos, event))
        pos = end + 1
    return events, offset + pos
