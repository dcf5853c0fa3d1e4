"""Bounded byte windows over a log file (TaskLogChunk). Cost is O(window), not O(file).

Windows never split a UTF-8 character: the start moves forward past continuation bytes
and the end moves back to the last complete character.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from runyard.wire import TaskLogChunk  # a wire model, shared with the light client

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "MIN_LIMIT", "TaskLogChunk", "read_log_window"]

DEFAULT_LIMIT = 65536
MIN_LIMIT = 1024
MAX_LIMIT = 262144


def read_log_window(
    path: Path | str | None, offset: int = -1, limit: int = DEFAULT_LIMIT, lines: bool = False
) -> TaskLogChunk:
    """Read up to ``limit`` bytes from ``offset`` (-1: the tail; past the end: reset + tail).

    With ``lines``, a window that reaches the end of the file stops after its last newline
    (a line still being written is left for the next window).
    """
    fd = _open_regular(path)
    if fd < 0:
        return TaskLogChunk(
            content="", start_offset=0, next_offset=0, file_size=0,
            has_more_before=False, has_more_after=False, reset=offset > 0,
        )
    try:
        size = os.fstat(fd).st_size
        reset = offset > size
        tail = offset < 0 or reset
        start = max(0, size - limit) if tail else offset
        # Up to 3 bytes more, so a start inside a character can move to the next one even
        # when the window is smaller than the rest of that character.
        data = os.pread(fd, min(limit + 3, size - start), start) if start < size else b""
    finally:
        os.close(fd)
    head = _skip_continuation(data, start)
    body = data[head : head + limit]
    body = body[: _complete_prefix(body)]
    begin = start + head
    if lines and begin + limit >= size:
        body = body[: body.rfind(b"\n") + 1]
    end = begin + len(body)
    return TaskLogChunk(
        content=body.decode("utf-8", errors="replace"),
        start_offset=begin,
        next_offset=end,
        file_size=size,
        has_more_before=begin > 0,
        has_more_after=end < size,
        reset=reset,
    )


def _open_regular(path: Path | str | None) -> int:
    """A descriptor of a regular file, or -1 (a FIFO or device must not block the reader)."""
    if not path:
        return -1
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return -1
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return -1
    return fd


def _skip_continuation(data: bytes, start: int) -> int:
    """Bytes to skip so the window starts on a character boundary."""
    skip = 0
    while start and skip < min(3, len(data)) and (data[skip] & 0xC0) == 0x80:
        skip += 1
    return skip


def _complete_prefix(body: bytes) -> int:
    """Length of ``body`` without a trailing incomplete UTF-8 sequence."""
    n = len(body)
    for back in range(1, min(4, n) + 1):
        byte = body[n - back]
        if byte & 0xC0 == 0x80:
            continue
        if byte & 0x80 == 0:
            return n
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4
        return n if back >= need else n - back
    return n
