"""``runyard logs -n LINES``: the last lines of a task's log, read backwards in windows.

The log is read through the same bounded byte windows as ``logs --offset``; windows are
fetched from the end until they hold enough line breaks (or the log's start is reached),
so a long log is never read whole to show its tail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

WINDOW = 262144  # the largest window the log API serves

ReadWindow = Callable[[int, int], Any]  # (offset, limit) -> TaskLogChunk


def last_lines(read: ReadWindow, count: int) -> tuple[str, int]:
    """``(text of the last count lines, offset just past them)``; ``read`` reads a window."""
    chunk = read(-1, WINDOW)
    text: str = chunk.content
    start: int = chunk.start_offset
    # count+1 breaks: the line before the first one shown must be complete too
    while start > 0 and text.count("\n") <= count:
        begin = max(0, start - WINDOW)
        earlier = read(begin, WINDOW)
        before = earlier.content.encode("utf-8")[: start - earlier.start_offset]
        text = before.decode("utf-8", errors="replace") + text
        start = earlier.start_offset
    lines = text.splitlines(keepends=True)
    return "".join(lines[-count:]) if count > 0 else "", chunk.next_offset
