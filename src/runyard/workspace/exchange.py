"""Swapping two folders in one atomic step (``renameat2`` with ``RENAME_EXCHANGE``).

Python's :mod:`os` has no ``renameat2``; glibc (2.28 on) does, reached through
:mod:`ctypes`. Where it is missing, or the file system cannot exchange (``EINVAL``), the
call raises :class:`ExchangeUnsupported` and the caller takes a slower path.

    exchange(type_dir_fd, "base#demo#x", history_fd, run_id)
"""

from __future__ import annotations

import ctypes
import errno
import os

RENAME_EXCHANGE = 2
_UNSUPPORTED = (errno.ENOSYS, errno.EINVAL, errno.EXDEV)


class ExchangeUnsupported(OSError):
    """This system or file system cannot swap the two names atomically."""


def _renameat2() -> object | None:
    try:
        return ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None


_RENAMEAT2 = _renameat2()


def exchange(dir_a: int, name_a: str, dir_b: int, name_b: str) -> None:
    """Swap ``dir_a/name_a`` and ``dir_b/name_b`` (both must exist) atomically."""
    if _RENAMEAT2 is None:
        raise ExchangeUnsupported(errno.ENOSYS, "renameat2 is not available")
    args = (dir_a, os.fsencode(name_a), dir_b, os.fsencode(name_b), RENAME_EXCHANGE)
    if _RENAMEAT2(*args) == 0:  # type: ignore[operator]
        return
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        raise ExchangeUnsupported(code, os.strerror(code))
    raise OSError(code, os.strerror(code), name_a)
