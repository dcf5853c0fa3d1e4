"""Reading a run's ``out/final-answer.md``: bounded, never through a symlink."""

from __future__ import annotations

import os
import stat
from pathlib import Path

FINAL_ANSWER = "final-answer.md"


def truncation_marker(size: int, kept: int) -> str:
    return f"\n\n[runyard: final answer truncated: it has {size} bytes, the first {kept} are kept]"


def read_final_answer(out_dir: Path, limit: int) -> str | None:
    """The answer text, at most ``limit`` bytes of it plus a marker; None when there is none.

    A missing, empty, non-regular or symlinked file counts as no answer.
    """
    try:
        fd = os.open(out_dir / FINAL_ANSWER, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        data = os.pread(fd, limit + 1, 0)
    finally:
        os.close(fd)
    if len(data) > limit:
        kept = _utf8_prefix(data[:limit])
        text = kept.decode("utf-8", "replace") + truncation_marker(info.st_size, len(kept))
    else:
        text = data.decode("utf-8", "replace")
    return text if text.strip() else None


def _utf8_prefix(data: bytes) -> bytes:
    """``data`` without a trailing partial UTF-8 character."""
    end = len(data)
    back = 0
    while back < min(4, end) and data[end - back - 1] & 0xC0 == 0x80:
        back += 1
    if back < end:
        lead = data[end - back - 1]
        if _sequence_length(lead) != back + 1:
            return data[: end - back - 1]
    return data


def _sequence_length(lead: int) -> int:
    if lead >> 5 == 0b110:
        return 2
    if lead >> 4 == 0b1110:
        return 3
    if lead >> 3 == 0b11110:
        return 4
    return 1
