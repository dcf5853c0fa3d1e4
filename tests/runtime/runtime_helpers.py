"""Shared helpers of the runtime tests."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from runyard.config import Settings
from runyard.runtime.workerlock import lock_held, read_owner
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskStatus

HERE = Path(__file__).parent


def make_settings(tmp_path: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "workspace_dir": tmp_path / "ws",
        "log_dir": tmp_path / "logs",
        "prefork": False,
        "cancel_grace_seconds": 1.0,
        "worker_env": {"PYTHONPATH": str(HERE)},
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def kill_workers(ws: Workspace) -> None:
    """SIGKILL every worker still holding a lock in ``ws`` (test cleanup)."""
    for task_id, _ in ws.iter_task_dirs():
        lock = ws.lock_path(task_id)
        owner = read_owner(lock)
        if owner is not None and lock_held(lock):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(owner.pid, signal.SIGKILL)


def wait_until(predicate: Callable[[], object], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def wait_state(ws: Workspace, task_id: str, state: str, timeout: float = 15.0) -> TaskStatus:
    found: list[TaskStatus] = []

    def reached() -> bool:
        status = ws.read_status(task_id)
        if status is not None and status.state == state:
            found.append(status)
            return True
        return False

    wait_until(reached, timeout)
    return found[0]


class RenameRecorder:
    """The names renamed into a folder, in order (inotify IN_MOVED_TO), to check publish
    order; with ``mask=IN_CREATE``, the names created in it.

    inotify merges an event into an unread one just like it, so two renames onto one name
    with no read between may show once; count writes by the unique names of their
    temporary files instead (``mask=IN_CREATE``).
    """

    IN_MOVED_TO = 0x80
    IN_CREATE = 0x100

    def __init__(self, folder: Path, mask: int = IN_MOVED_TO) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0
        watch = self._libc.inotify_add_watch(self.fd, str(folder).encode(), mask)
        assert watch >= 0
        self.names: list[str] = []

    def read(self) -> list[str]:
        with contextlib.suppress(BlockingIOError):
            while data := os.read(self.fd, 65536):
                self._parse(data)
        return self.names

    def _parse(self, data: bytes) -> None:
        pos = 0
        while pos < len(data):
            _, _, _, length = struct.unpack_from("iIII", data, pos)
            raw = data[pos + 16 : pos + 16 + length]
            self.names.append(raw.rstrip(b"\0").decode())
            pos += 16 + length

    def close(self) -> None:
        os.close(self.fd)


# holds a lock on a path in its own process, says so, and lets go when its stdin closes:
# "supervise" as a supervisor does (hold_supervision), "shared" or "exclusive" as a bare
# flock by anyone who may open the path
HOLDER = """
import fcntl, os, sys
from pathlib import Path
from runyard.runtime.workerlock import hold_supervision
path, kind = Path(sys.argv[1]), sys.argv[2]
if kind == "supervise":
    fd = hold_supervision(path)
else:
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH if kind == "shared" else fcntl.LOCK_EX)
print("held" if fd is not None else "none", flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def held_elsewhere(path: Path, kind: str) -> Iterator[None]:
    """``path`` locked (see HOLDER) by another process while the body runs."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), kind],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=30) == 0
        holder.stdout.close()
