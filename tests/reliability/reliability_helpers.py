"""Shared helpers of the reliability tests: a small real filesystem, polling, records."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from serverproc import ServerProcess


@contextlib.contextmanager
def small_disk(path: Path, size: str = "8m") -> Iterator[Path]:
    """A real tmpfs of ``size`` mounted at ``path`` (root only), unmounted afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> Path:
    """Write a filler file under ``path`` until the filesystem answers ENOSPC."""
    filler = path / "filler.bin"
    block = b"\0" * 65536
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                os.write(fd, block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
        for size in (4096, 512, 1):  # the last scraps too
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, block[:size])
    finally:
        os.close(fd)
    return filler


def until(check: Callable[[], Any], timeout: float = 30.0, pause: float = 0.05) -> Any:
    """Poll ``check`` until it answers something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(pause)


def status_of(server: ServerProcess, task_id: str) -> dict[str, Any]:
    reply = server.call("status", task_id=task_id)
    assert reply["success"], reply
    answer: dict[str, Any] = reply["answer"]
    return answer


def submit(server: ServerProcess, **arguments: Any) -> dict[str, Any]:
    reply = server.call("submit", **arguments)
    assert reply["success"], reply
    answer: dict[str, Any] = reply["answer"]
    return answer


def wait_cmd(flag: Path) -> str:
    """A shell command that runs until ``flag`` exists."""
    return f"while [ ! -e {flag} ]; do sleep 0.05; done; echo done"


def type_folder_entries(workspace: Path, task_type: str = "base") -> list[str]:
    """Every entry of a type folder, hidden ones too."""
    return sorted(os.listdir(workspace / task_type))


def disk_status(workspace: Path, task_id: str) -> dict[str, Any] | None:
    path = workspace / task_id.split("#", 1)[0] / task_id / "status.json"
    try:
        data: dict[str, Any] = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data
