"""Disk space: which write errors mean "no room", and the low-space guard for new work.

A full disk is a state, not a crash: a record write that fails with ENOSPC, EDQUOT or EIO
is retried later (:func:`is_space_error` says which), and new work is refused with
:class:`InsufficientStorage` (HTTP 507) before the disk is full, while less than
``min_free_mb`` is free under the workspace.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from runyard.errors import InsufficientStorage

SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})
UNWRITTEN_NOTE = "the record could not be written yet"
SHM_FULL = "SQLITE_IOERR_SHMSIZE"


def is_space_error(exc: BaseException) -> bool:
    """True for an OSError a full disk (or a failing one) gives: retry, don't crash."""
    if isinstance(exc, OSError) and exc.errno in SPACE_ERRNOS:
        return True
    if type(exc).__name__ != "OperationalError":
        return False
    # sqlite3 reports a full disk as "database or disk is full", and a WAL index (the -shm
    # file) it cannot grow as SQLITE_IOERR_SHMSIZE ("disk I/O error")
    return "disk is full" in str(exc) or getattr(exc, "sqlite_errorname", "") == SHM_FULL


def free_mb(path: Path) -> float:
    """Megabytes an unprivileged writer may still use under ``path``."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize / (1 << 20)


def storage_report(path: Path, min_free_mb: int) -> dict[str, Any]:
    """What ``/health`` says about space: free MB, the guard, and whether it refuses."""
    try:
        free = free_mb(path)
    except OSError:
        return {"free_mb": None, "min_free_mb": min_free_mb, "low": False}
    return {"free_mb": round(free, 1), "min_free_mb": min_free_mb, "low": free < min_free_mb}


def require_space(path: Path, min_free_mb: int) -> None:
    """Raise :class:`InsufficientStorage` when new work would eat the last ``min_free_mb``."""
    if min_free_mb <= 0:
        return
    try:
        free = free_mb(path)
    except OSError:
        return  # cannot tell: the write itself will say
    if free < min_free_mb:
        raise InsufficientStorage(
            f"Only {free:.0f} MB free under the workspace, below min_free_mb={min_free_mb}: "
            "new work is refused until space is freed"
        )


def space_shortage(path: Path, min_free_mb: int) -> str | None:
    """Why queued work may not launch now (less than ``min_free_mb`` free), or None; the
    reason a waiting run's status gives (``runtime/spacewait.py``)."""
    if min_free_mb <= 0:
        return None
    try:
        free = free_mb(path)
    except OSError:
        return None  # cannot tell: the launch itself will say
    if free >= min_free_mb:
        return None
    return f"waiting for disk space: {free:.0f} MB free, min_free_mb {min_free_mb}"


def storage_error(exc: BaseException, what: str) -> InsufficientStorage:
    """The 507 error for ``what`` (a creation) that failed for lack of space."""
    return InsufficientStorage(f"Not enough disk space to {what}; nothing was created ({exc})")
