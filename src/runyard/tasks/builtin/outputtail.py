"""The last lines a command wrote, as its task's log holds them: what the ``command``
task's result (and its failure) carries, so a caller sees why without reading the log.

A worker's stdout is its task's log (opened ``O_APPEND`` by the launcher), and a command
inherits it, so the log's size before the command starts marks where its output begins::

    mark = LogMark.now()
    ...  # run the command
    tail = mark.tail()     # at most TAIL_LINES lines and TAIL_BYTES bytes

Only the bytes written since the mark are read, never more than :data:`TAIL_BYTES`, from
the log reopened through ``/proc/self/fd/1`` (checked to be the same file). When stdout is
not a regular file (a terminal, a pipe) there is no tail: ``""``.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass

TAIL_LINES = 20
TAIL_BYTES = 4096
STDOUT = 1
CUT_MARK = "…".encode()  # the front of a line the bound cut


@dataclass(frozen=True)
class LogMark:
    """The log file (device, inode) and its size when the mark was taken."""

    file: tuple[int, int] | None
    start: int = 0

    @classmethod
    def now(cls) -> LogMark:
        sys.stdout.flush()  # what this process wrote goes before the mark
        try:
            info = os.fstat(STDOUT)
        except OSError:
            return cls(None)
        if not stat.S_ISREG(info.st_mode):
            return cls(None)
        return cls((info.st_dev, info.st_ino), info.st_size)

    def tail(self) -> str:
        """The last lines written since the mark (at most :data:`TAIL_LINES` lines and
        :data:`TAIL_BYTES` bytes, a line cut at the front left out), ``""`` if none."""
        if self.file is None:
            return ""
        try:
            data = self._read_end()
        except OSError:
            return ""
        return last_lines(data, cut=len(data) == TAIL_BYTES - len(CUT_MARK))

    def _read_end(self) -> bytes:
        fd = os.open(f"/proc/self/fd/{STDOUT}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            info = os.fstat(fd)
            if (info.st_dev, info.st_ino) != self.file:
                return b""
            begin = max(self.start, info.st_size - (TAIL_BYTES - len(CUT_MARK)))
            return os.pread(fd, info.st_size - begin, begin)
        finally:
            os.close(fd)


def last_lines(data: bytes, *, cut: bool) -> str:
    """The last :data:`TAIL_LINES` lines of ``data`` as text, at most :data:`TAIL_BYTES`
    bytes; with ``cut`` (``data`` began inside a line) that line's end is kept behind a
    ``…``. Bytes that are not UTF-8 read as U+FFFD."""
    lines = data.decode("utf-8", errors="replace").splitlines()
    kept = lines[-TAIL_LINES:]
    if cut and kept and len(kept) == len(lines):  # the cut line is among those kept
        kept[0] = CUT_MARK.decode() + kept[0]
    return _bounded("\n".join(kept))


def _bounded(text: str) -> str:
    """``text``, its front cut behind a ``…`` where its UTF-8 passes :data:`TAIL_BYTES`
    (U+FFFD takes three bytes for each byte it replaced)."""
    encoded = text.encode()
    if len(encoded) <= TAIL_BYTES:
        return text
    end = encoded[len(encoded) - (TAIL_BYTES - len(CUT_MARK)) :]
    return CUT_MARK.decode() + end.decode("utf-8", errors="ignore")
