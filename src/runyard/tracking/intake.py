"""Metric lines that any process of a task appends to ``$RUNYARD_METRICS_FILE``.

A shell script, a C++ trainer or the ``command`` task's program logs a point by appending
one JSON line to the file the variable names::

    echo '{"name": "loss", "value": 0.25, "step": 3}' >> "$RUNYARD_METRICS_FILE"

``step`` may be left out (the metric's next step) and so may ``time`` (when the worker
reads the line). :class:`MetricsIntake` reads the file from where it last stopped, each
line checked by the rules of :mod:`runyard.tracking.points`, and hands each valid one to
its ``record`` callback. A bad line is refused with one line of the run's log
(``metrics: line N refused: <reason>``) and skipped; it never fails the run. A line that
has no newline yet waits for it, except at the run's end, where it is taken if it is a
whole JSON object.

It is bounded whatever the file holds: a line over :data:`MAX_LINE_BYTES` is refused
without being kept whole, a poll reads at most :data:`POLL_BYTES`, a run's file is read
up to :data:`MAX_INPUT_BYTES`, and after :data:`MAX_REFUSALS` refusals the log says so
once and then stays quiet.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from runyard.tracking.points import METRICS_ENV, LoggedLine, parse_logged

MAX_LINE_BYTES = 64 * 1024
CHUNK_BYTES = 1024 * 1024
POLL_BYTES = 16 * 1024 * 1024
MAX_INPUT_BYTES = 256 * 1024 * 1024
MAX_REFUSALS = 20
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class MetricsIntake:
    """Reads ``path`` incrementally; ``record`` takes each valid line (and may raise
    ``ValueError`` to refuse it), ``say`` writes one line to the run's log."""

    def __init__(
        self, path: Path, record: Callable[[LoggedLine], None], say: Callable[[str], None]
    ) -> None:
        self.path = path
        self._record = record
        self._say = say
        self._lock = threading.Lock()
        self.offset = 0
        self.line_number = 0
        self.refused = 0
        self._partial = b""
        self._skipping = False  # inside a line already refused as too long
        self._capped = False

    def poll(self, *, final: bool = False) -> int:
        """Take the lines appended since the last poll; how many were recorded. With
        ``final`` it reads to the end of the file (within the caps) and takes a last line
        that lacks its newline."""
        with self._lock:
            taken = 0
            budget = MAX_INPUT_BYTES if final else POLL_BYTES
            for chunk in self._chunks(budget):
                taken += self._feed(chunk)
            if final and self._partial and not self._skipping:
                partial, self._partial = self._partial, b""
                self.line_number += 1
                taken += self._line(partial)
            return taken

    def reset_lock(self) -> None:
        """A fresh lock (in a forked child, whose copy may be held by a gone thread)."""
        self._lock = threading.Lock()

    def _chunks(self, budget: int) -> Iterator[bytes]:
        try:
            fd = os.open(self.path, READ_FLAGS)
        except OSError:
            return  # not there (yet), or a symlink put in its place
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return
            while budget > 0:
                room = MAX_INPUT_BYTES - self.offset
                if room <= 0:
                    self._cap()
                    return
                chunk = os.pread(fd, min(CHUNK_BYTES, budget, room), self.offset)
                if not chunk:
                    return
                self.offset += len(chunk)
                budget -= len(chunk)
                yield chunk
        finally:
            os.close(fd)

    def _feed(self, chunk: bytes) -> int:
        taken = 0
        parts = (self._partial + chunk).split(b"\n")
        self._partial = parts.pop()
        for part in parts:
            self.line_number += 1
            if self._skipping:
                self._skipping = False  # the end of a line refused as too long
                continue
            taken += self._line(part)
        if len(self._partial) > MAX_LINE_BYTES and not self._skipping:
            # refused now, never held whole; counted when its newline comes
            self._refuse(f"longer than {MAX_LINE_BYTES} bytes", self.line_number + 1)
            self._partial, self._skipping = b"", True
        elif self._skipping:
            self._partial = b""
        return taken

    def _line(self, raw: bytes) -> int:
        if not raw.strip():
            return 0  # an empty line is no point, and no mistake worth a log line
        if len(raw) > MAX_LINE_BYTES:
            self._refuse(f"longer than {MAX_LINE_BYTES} bytes", self.line_number)
            return 0
        try:
            line = parse_logged(json.loads(raw.decode()))
            self._record(line)
        except (ValueError, RecursionError) as exc:
            self._refuse(_reason(exc), self.line_number)
            return 0
        return 1

    def _refuse(self, reason: str, number: int) -> None:
        self.refused += 1
        if self.refused <= MAX_REFUSALS:
            self._say(f"metrics: line {number} refused: {reason}")
        elif self.refused == MAX_REFUSALS + 1:
            self._say(f"metrics: more than {MAX_REFUSALS} lines refused; no more are logged")

    def _cap(self) -> None:
        if not self._capped:
            self._capped = True
            self._say(f"metrics: ${METRICS_ENV} is read up to {MAX_INPUT_BYTES} bytes; "
                      "the rest is ignored")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON ({exc.msg})"
    text = " ".join(str(exc).split())
    return text[:200]
