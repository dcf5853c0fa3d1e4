"""The worker lock: ``<task_dir>/.worker.lock``, flock'ed by the worker for its whole life.

The kernel drops an flock when its holder dies, so "the lock is held" means "a worker of
this folder is alive" whatever happened to its PID since. The file also records
``"<pid> <start_time> <run_id>"`` so a canceller can signal the right process: the start
time (``/proc/<pid>/stat``) tells a reused PID apart.

A supervisor (or ``run_task`` waiting on its own child) holds a shared flock on the task
folder itself while it watches a run: it will learn the exact exit code or signal, so
readers leave the settling to it while that lock is held. (Earlier versions held it on a
``.supervised`` file in the folder, which is still honoured. A file of its own would cost
every run an inode, and on ext4 without a journal each new inode pays for the inodes freed
in the last minutes: see ``bench/floor.py``.)

Settlers (whoever records a dead worker's end) take the same lock, non-blocking, while
they re-read and rewrite the status; the worker only starts from a ``queued`` status read
under the lock, so a settler and a starting worker never both act on one run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from runyard.executors.pidwatch import process_start_time

OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC
SUPERVISED_FILE = ".supervised"  # where earlier versions held the supervision
SUPERVISION_WAIT = 1.0  # seconds a launch waits for an exclusive lock on its folder to go


@dataclass(frozen=True)
class LockOwner:
    pid: int
    start_time: int | None
    run_id: str


def acquire_worker_lock(path: Path, run_id: str, timeout: float = 1.0) -> int | None:
    """Take the lock for this process (retrying up to ``timeout``); the fd, or None if busy."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | OPEN_FLAGS, 0o644)
    deadline = time.monotonic() + timeout
    while not _try_flock(fd, fcntl.LOCK_EX):
        if time.monotonic() >= deadline:
            os.close(fd)
            return None
        time.sleep(0.002)
    pid = os.getpid()
    record = f"{pid} {process_start_time(pid) or 0} {run_id}\n".encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, record, 0)
    return fd


def lock_held(path: Path) -> bool:
    """True while some live process holds the lock on ``path``."""
    return _held_by_another(path, fcntl.LOCK_SH)


def _held_by_another(path: Path, probe: int) -> bool:
    """True when ``probe`` (a shared or exclusive flock) cannot be had on ``path`` now."""
    try:
        fd = os.open(path, os.O_RDONLY | OPEN_FLAGS)
    except OSError:
        return False
    try:
        if _try_flock(fd, probe):
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        return True
    finally:
        os.close(fd)


def read_owner(path: Path) -> LockOwner | None:
    """The process recorded in the lock file (meaningful only while the lock is held)."""
    try:
        fd = os.open(path, os.O_RDONLY | OPEN_FLAGS)
    except OSError:
        return None
    try:
        raw = os.pread(fd, 256, 0)
    finally:
        os.close(fd)
    parts = raw.decode("ascii", "replace").split()
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    start = int(parts[1]) or None
    return LockOwner(int(parts[0]), start, parts[2])


@contextlib.contextmanager
def holding_if_free(path: Path) -> Iterator[bool]:
    """Hold the lock while the body runs if nobody does; yields whether it was free."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | OPEN_FLAGS, 0o644)
    except OSError:
        yield False
        return
    try:
        yield _try_flock(fd, fcntl.LOCK_EX)
    finally:
        os.close(fd)


def _try_flock(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def hold_supervision(task_dir: Path) -> int | None:
    """Mark the run of ``task_dir`` as watched by this process until the returned fd is
    closed. Nothing is created: the lock is on the folder, except where the file system
    will not lock a folder (NFS emulates ``flock`` with byte-range locks, which need an open
    file): there on the ``.supervised`` file, as before.

    None when there is no such folder, or when the lock stays taken for
    :data:`SUPERVISION_WAIT` seconds: a reader's probe holds it for microseconds, and
    anyone who may open the folder may hold it longer, which must not stall a launch (the
    run then goes on unmarked, and a reader may record its end if its worker dies).
    """
    try:
        fd = os.open(task_dir, os.O_RDONLY | os.O_DIRECTORY | OPEN_FLAGS)
    except OSError:
        return None
    try:
        held = _share_within(fd)
    except OSError:  # a folder this file system will not lock
        os.close(fd)
        return _hold_file(task_dir / SUPERVISED_FILE)
    if held:
        return fd
    os.close(fd)
    return None


def _hold_file(path: Path) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | OPEN_FLAGS, 0o644)
    except OSError:
        return None
    with contextlib.suppress(OSError):
        if _share_within(fd):
            return fd
    os.close(fd)
    return None


def _share_within(fd: int) -> bool:
    """Take a shared flock on ``fd``, waiting at most :data:`SUPERVISION_WAIT` seconds for
    an exclusive one to go."""
    deadline = time.monotonic() + SUPERVISION_WAIT
    while not _try_flock(fd, fcntl.LOCK_SH):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


def supervised(task_dir: Path) -> bool:
    """True while some process watches the run of ``task_dir`` (holds the folder, or the
    ``.supervised`` file in it: where a folder cannot be locked, and in earlier versions)."""
    return _folder_held(task_dir) or _held_by_another(task_dir / SUPERVISED_FILE, fcntl.LOCK_EX)


def _folder_held(task_dir: Path) -> bool:
    try:
        fd = os.open(task_dir, os.O_RDONLY | os.O_DIRECTORY | OPEN_FLAGS)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # a folder this file system will not lock: its holders use the file
        return False
    finally:
        os.close(fd)
    return False
