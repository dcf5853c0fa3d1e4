from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from runyard.executors.cgroups import detect_host  # noqa: E402
from runyard.executors.containment import (  # noqa: E402
    AGENT_PREFIX,
    TASK_PREFIX,
    Containment,
    agent_cgroup_name,
    task_cgroup_name,
)
from runyard.executors.prefork import sweep_spares  # noqa: E402
from serverproc import ServerProcess, start_server  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _runs_leave_no_cgroup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """After the session, the cgroups of the runs its tests made are swept (what is left in
    them killed, the cgroup removed), and the spares of the servers it killed. A server
    stopped (or killed) while its runs went on leaves their cgroups to its next start, and
    a test then throws the workspace away, so without this each run of the suite as root
    leaves dozens on the machine. Only runs found under this session's own temporary
    folder are touched, never another session's (or xdist worker's)."""
    yield
    host = detect_host()
    if host is None:
        return
    sweep_spares(host)  # the standbys' spares of the servers tests killed
    present: set[str] = set()
    for base in host.bases.values():
        with contextlib.suppress(OSError):
            present.update(
                name for name in os.listdir(base) if name.startswith((TASK_PREFIX, AGENT_PREFIX))
            )
    if not present:
        return
    containment = Containment.detect()
    for name in present & _run_cgroups_under(tmp_path_factory.getbasetemp()):
        containment.sweep(name)


def _run_cgroups_under(root: Path) -> set[str]:
    """The cgroup names of the task runs (by their ``status.json``) and agent runs (by
    their folders) in the workspaces under ``root``."""
    names: set[str] = set()
    for folder, dirs, files in os.walk(root):
        names.update(agent_cgroup_name(name) for name in dirs if name.startswith("run-"))
        if "status.json" in files:
            with contextlib.suppress(
                OSError, ValueError, AttributeError, TypeError, RecursionError
            ):
                run_id = json.loads(_regular_file_bytes(Path(folder, "status.json"))).get("run_id")
                if isinstance(run_id, str):
                    names.add(task_cgroup_name(run_id))
    return names


def _regular_file_bytes(path: Path) -> bytes:
    """What the regular file at ``path`` holds; b"" for anything else, such as the FIFOs
    and links that tests put in a status's place (opened plainly, a FIFO would wait for a
    writer forever)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        with open(fd, "rb", closefd=False) as file:
            return file.read()
    finally:
        os.close(fd)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A real server on 127.0.0.1 (random port) with its own workspace under tmp_path."""
    proc = start_server(tmp_path / "srv")
    try:
        yield proc
    finally:
        proc.stop()
