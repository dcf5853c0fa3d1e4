"""Helpers of the retention tests: tasks on a real server, sizes measured independently."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from serverproc import ServerProcess


def finished(server: ServerProcess, name: str, source: str = "", x: int = 1) -> dict[str, Any]:
    """Submit a demo task and wait for it to succeed; its final status."""
    handle = server.call("submit", task="demo", task_name=name, x=x, y=2, source_tasks=source)
    assert handle["success"], handle
    answer = handle["answer"]
    final = server.call(
        "wait_task", task_id=answer["task_id"], run_id=answer["run_id"], poll_interval=0.05
    )
    assert final["answer"]["state"] == "succeeded", final
    return final["answer"]  # type: ignore[no-any-return]


def sleeping(server: ServerProcess, name: str, source: str = "") -> dict[str, Any]:
    """A command task that runs until killed (state running once this returns)."""
    handle = server.call(
        "submit", task="command", command="sleep 120", task_name=name, source_tasks=source
    )["answer"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = server.call("status", task_id=handle["task_id"])["answer"]
        if status["state"] == "running":
            return status  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError("the command task never ran")


def gc(server: ServerProcess, *flags: str) -> dict[str, Any]:
    """``runyard gc --json`` through the CLI, against the server."""
    argv = [sys.executable, "-m", "runyard", "gc", "--json", *flags]
    done = subprocess.run(
        argv, env=server.cli_env(), capture_output=True, text=True, timeout=60, cwd=server.root
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def disk_bytes(*paths: Path) -> int:
    """Bytes of the regular files under ``paths`` (each inode once)."""
    seen: dict[tuple[int, int], int] = {}
    for path in paths:
        for folder, _dirs, files in os.walk(path):
            for name in files:
                info = os.lstat(os.path.join(folder, name))
                seen[(info.st_dev, info.st_ino)] = info.st_size
        if path.is_file():
            info = os.lstat(path)
            seen[(info.st_dev, info.st_ino)] = info.st_size
    return sum(seen.values())


def task_dir(server: ServerProcess, task_id: str) -> Path:
    return server.workspace / task_id.split("#", 1)[0] / task_id
