"""Real ``runyard`` CLI subprocesses for tests: run one, start one in the background, and
wait for conditions on it (connected to the server, processes in a folder gone)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from serverproc import ServerProcess

CLI = [sys.executable, "-m", "runyard"]


def as_from_a_terminal() -> None:
    """A ``preexec_fn``: Ctrl-C's SIGINT at its default, as a shell in a terminal starts a
    command. A suite started as a background job inherits SIGINT ignored, and a Python
    started with it ignored installs no KeyboardInterrupt handler: the CLI would never
    see the Ctrl-C these tests press."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}


def cli(srv: ServerProcess, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``runyard ARGS`` against ``srv`` (its URL and token in the environment)."""
    return subprocess.run(
        [*CLI, *args], cwd=srv.root, env=srv.cli_env(), capture_output=True, text=True,
        timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def start_cli(cwd: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, *args], cwd=cwd, env=env, text=True, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=as_from_a_terminal,
    )  # fmt: skip


def wait_for(check: Callable[[], object], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        time.sleep(0.05)


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def connected_to(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds an established TCP connection to 127.0.0.1:``port``:
    the CLI is past its start and talking to the server."""
    mine = _socket_inodes(pid)
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote, state, inode = fields[2], fields[3], fields[9]
        if state == "01" and int(remote.split(":")[1], 16) == port and inode in mine:
            return True
    return False


def _live_in(entry: Path, folder: Path) -> bool:
    try:
        if os.readlink(entry / "cwd") != str(folder):
            return False
        state = (entry / "stat").read_text().rsplit(") ", 1)[1][0]
    except OSError:
        return False
    return state != "Z"


def processes_in(folder: Path) -> list[int]:
    """Pids of live processes whose working directory is ``folder`` (a task's workers)."""
    return [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and _live_in(entry, folder)
    ]
