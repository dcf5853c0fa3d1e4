"""agent_limits hold inside a real bubblewrap sandbox, envFacts say what enforces them, and
nothing a run leaves behind outlives it (real runs, real cgroups)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import wait_done
from agent_support import needs_bwrap

from runyard.agents.runs import RunRequest
from runyard.api.agentservice import AgentService
from runyard.config import ResourceLimits
from runyard.executors.cgroups import detect_host
from runyard.executors.containment import agent_cgroup_name
from runyard.wire import TaskState

Make = Callable[..., AgentService]
HOST = detect_host()
sandboxed = [pytest.mark.sandbox, needs_bwrap]


def run_probe(service: AgentService, script: str, timeout: float = 90.0) -> dict[str, Any]:
    session = service.catalog.create_session("limits")
    run = service.runs.create(RunRequest(session.id, script, package="limits_probe"))
    done = wait_done(service, run.id, timeout)
    assert done.state == TaskState.SUCCEEDED, done
    out = service.layout.run_subdir(run.id, "out") / "limits.json"
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def enforcer(resource: str) -> str:
    """What limits ``resource`` here: this host's cgroup version where it can, else rlimit."""
    return HOST.version if HOST is not None and resource in HOST.limitable else "rlimit"


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def wait_dead(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid)


@pytest.mark.parametrize("mode", [pytest.param("bwrap", marks=sandboxed), "none"])
def test_a_pids_limit_stops_a_fork_storm(make_service: Make, mode: str) -> None:
    service = make_service(mode, agent_limits=ResourceLimits(pids=64))
    found = run_probe(service, "forks 400")
    assert found["forks"]["succeeded"] < 64, found["forks"]
    assert "BlockingIOError" in found["forks"]["error"] or "Resource" in found["forks"]["error"]
    limits = found["envFacts"]["limits"]
    assert limits["pids"] == 64 and limits["enforced_by"] == enforcer("pids")
    assert limits["by"] == {"pids": enforcer("pids")}
    assert limits["kill"] == (HOST.version if HOST is not None else "process group")


@pytest.mark.parametrize("mode", [pytest.param("bwrap", marks=sandboxed), "none"])
def test_the_3_gib_allocation_is_killed_and_the_host_is_fine(
    make_service: Make, mode: str
) -> None:
    service = make_service(mode, agent_limits=ResourceLimits(memory_mb=512))
    found = run_probe(service, "alloc 3072")
    assert found["alloc"]["exit"] == -9 and found["alloc"]["stdout"] == "", found["alloc"]
    limits = found["envFacts"]["limits"]
    assert limits["memory_mb"] == 512 and limits["enforced_by"] == enforcer("memory")
    assert run_probe(service, "alloc 64")["alloc"] == {"mib": 64, "exit": 0, "stdout": "touched 64"}


def test_a_double_forked_grandchild_dies_with_its_run(make_service: Make) -> None:
    service = make_service("none")
    session = service.catalog.create_session("escape")
    run = service.runs.create(RunRequest(session.id, "double-fork", package="limits_probe"))
    assert wait_done(service, run.id).state == TaskState.SUCCEEDED
    pid = int((service.layout.run_subdir(run.id, "out") / "grandchild.pid").read_text())
    try:
        assert wait_dead(pid), "the run's grandchild outlived it"
        assert HOST is not None and HOST.find(agent_cgroup_name(run.id)) is None
    finally:
        if alive(pid):
            os.kill(pid, 9)


def test_an_adopted_runs_leftovers_die_when_it_is_cancelled(make_service: Make) -> None:
    first = make_service("none")
    session = first.catalog.create_session("adopted")
    script = "double-fork\nwait-for never"
    run = first.runs.create(RunRequest(session.id, script, package="limits_probe"))
    pid_file = first.layout.run_subdir(run.id, "out") / "grandchild.pid"
    deadline = time.monotonic() + 30
    while not pid_file.exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    pid = int(pid_file.read_text())
    first.stop()  # the run goes on; the next service adopts it
    try:
        second = make_service("none")
        assert second.runs.cancel(run.id).state == TaskState.CANCELLED
        assert wait_dead(pid), "the adopted run's grandchild outlived its cancel"
    finally:
        if alive(pid):
            os.kill(pid, 9)
