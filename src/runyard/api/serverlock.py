"""One server per workspace: an exclusive ``flock`` on ``<workspace>/server.lock``.

Held for the server's whole life and released by the kernel when the process ends, even
by kill -9 (a lock, not a pid file: nothing stale to clean). A second ``serve`` on the same
workspace fails at once with :class:`ConfigError` naming the pid and address of the
first, read from ``server.json`` (which also holds the token: only pid and url are told).
File-mode commands (``run``, ``ls``, ``status``) never take this lock.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from runyard.errors import ConfigError
from runyard.workspace.atomic import read_json_tolerant
from runyard.workspace.space import is_space_error

LOCK_FILE = "server.lock"


def hold_server_lock(workspace_dir: Path, server_json: Path) -> int:
    """The fd holding the workspace's server lock (keep it open); ConfigError if taken."""
    workspace_dir.mkdir(parents=True, exist_ok=True)
    path = workspace_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd, server_json)
        os.close(fd)
        raise ConfigError(
            f"Another runyard server already serves {workspace_dir} ({holder}); "
            "stop it first or use another workspace"
        ) from None
    _name_holder(fd)
    return fd


def _name_holder(fd: int) -> None:
    """Write this pid into the lock file, for a second start to name; on a full disk the
    lock holds without it (that start then names the pid as unknown)."""
    os.ftruncate(fd, 0)
    try:
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    except OSError as exc:
        if not is_space_error(exc):
            raise


def _holder(fd: int, server_json: Path) -> str:
    record = read_json_tolerant(server_json) or {}
    pid = record.get("pid")
    if not isinstance(pid, int):  # not announced yet: the lock file names the pid
        raw = os.pread(fd, 32, 0).decode(errors="replace").strip()
        pid = int(raw) if raw.isdigit() else None
    url = record.get("url") if isinstance(record.get("url"), str) else "address not yet known"
    return f"pid {pid if pid is not None else 'unknown'}, {url}"
