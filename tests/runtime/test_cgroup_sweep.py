"""The sweep of ended runs' cgroups, against this machine's real cgroups and workspaces.

Every cgroup here is a real one, made where runyard makes its own; each test's names carry
a fresh id, so nothing of another run on this machine is looked at.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_helpers import wait_state, wait_until

from runyard.executors.base import Limits
from runyard.executors.cgroups import Cgroup, detect_host
from runyard.executors.containment import AGENT_PREFIX, LAUNCH_PREFIX, TASK_PREFIX
from runyard.runtime.cgroupsweep import (
    STALE_SECONDS,
    CgroupSweeper,
    is_empty,
    run_cgroups,
    sweep_once,
)
from runyard.runtime.reconcile import ended_runs

HOST = detect_host()
pytestmark = pytest.mark.skipif(HOST is None, reason="no writable cgroup here")
OLD = STALE_SECONDS + 60


@pytest.fixture
def made() -> Iterator[list[Cgroup]]:
    groups: list[Cgroup] = []
    yield groups
    for group in groups:
        group.kill()
        group.remove()


def make(made: list[Cgroup], prefix: str, age: float = 0.0, limits: Limits | None = None) -> str:
    """A real cgroup ``<prefix><fresh id>`` made ``age`` seconds ago (its folders' mtime)."""
    assert HOST is not None
    name = f"{prefix}{uuid.uuid4().hex}"
    group = HOST.create(name, limits or Limits())
    made.append(group)
    when = time.time() - age
    for folder in group.folders.values():
        os.utime(folder, (when, when))
    return name


def sleeper_in(folder: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    (folder / "cgroup.procs").write_text(str(proc.pid))
    return proc


def present(name: str) -> bool:
    assert HOST is not None
    return HOST.find(name) is not None


def test_a_sweep_removes_empty_leftovers_a_minute_old_and_nothing_else(made):
    assert HOST is not None
    old = [make(made, prefix, OLD) for prefix in (TASK_PREFIX, AGENT_PREFIX, LAUNCH_PREFIX)]
    young = make(made, TASK_PREFIX)
    watched = make(made, TASK_PREFIX, OLD)
    not_ours = make(made, "runyard-test-", OLD)
    busy = make(made, TASK_PREFIX, OLD)
    proc = sleeper_in(next(iter(HOST.find(busy).folders.values())))
    try:
        removed = sweep_once(HOST, {watched})
        assert set(old) <= set(removed)
        assert not any(map(present, old))
        for kept in (young, watched, not_ours, busy):
            assert present(kept) and kept not in removed
        assert proc.poll() is None  # a sweep never kills
    finally:
        proc.kill()
        proc.wait(10)


def test_a_process_in_one_hierarchy_of_a_cgroup_keeps_all_of_it(made):
    """On cgroup v1 a run's cgroup is a folder in several hierarchies: a process that sits
    in only one of them (the others empty) still keeps the whole cgroup."""
    assert HOST is not None
    name = make(made, TASK_PREFIX, OLD, Limits(memory_bytes=256 << 20, pids=64))
    folders = HOST.find(name).folders
    last = folders[sorted(folders)[-1]]
    proc = sleeper_in(last)
    try:
        assert name not in sweep_once(HOST, set(), lambda names: set(names))
        assert all(folder.is_dir() for folder in folders.values())
    finally:
        proc.kill()
        proc.wait(10)


def test_a_young_cgroup_goes_only_when_its_run_is_recorded_ended(made):
    assert HOST is not None
    ended, unexplained = make(made, TASK_PREFIX), make(made, AGENT_PREFIX)
    busy = make(made, TASK_PREFIX)
    proc = sleeper_in(next(iter(HOST.find(busy).folders.values())))
    asked: list[set[str]] = []

    def recorded(names: set[str]) -> set[str]:
        asked.append(set(names))
        return {ended, busy, f"{TASK_PREFIX}made-up"}  # claims more than it was asked

    try:
        removed = sweep_once(HOST, set(), recorded)
        assert ended in removed and not present(ended)
        assert present(unexplained) and present(busy)  # busy: its record cannot remove it
        assert len(asked) == 1 and {ended, unexplained} <= asked[0] and busy not in asked[0]
    finally:
        proc.kill()
        proc.wait(10)


def test_the_sweeper_sweeps_again_while_it_runs(made):
    assert HOST is not None
    sweeper = CgroupSweeper(HOST, set, lambda names: set(), interval=0.2)
    sweeper.start()
    try:
        left = make(made, LAUNCH_PREFIX, OLD)
        wait_until(lambda: not present(left), timeout=5)
    finally:
        sweeper.stop()


def _command(sup, line: str, **extra: object):  # type: ignore[no-untyped-def]
    return sup.submit("command", {"command": line, "shell": True, "artifacts": "", **extra})


def test_ended_runs_are_read_from_statuses_and_kept_runs(make_supervisor, workspace, tmp_path):
    sup = make_supervisor()
    first = _command(sup, "true", task_name="again")
    wait_state(workspace, first.task_id, "succeeded")
    second = _command(sup, "true", task_name="again")  # the first run is kept in history
    flag = tmp_path / "go"
    running = _command(sup, f"while [ ! -e {flag} ]; do sleep 0.05; done")
    wait_state(workspace, second.task_id, "succeeded")
    wait_state(workspace, running.task_id, "running")
    try:
        asked = {first.run_id, second.run_id, running.run_id, "not-a-run-of-ours", "../x"}
        assert ended_runs(workspace, asked) == {first.run_id, second.run_id}
    finally:
        flag.touch()


def test_a_supervisor_start_removes_the_cgroups_of_its_ended_runs(make_supervisor, workspace, made):
    """A file-mode ``runyard mcp`` or a server: their supervisor's start takes the cgroup of
    a run that ended unwatched (made here as the crash left it), and not another one."""
    assert HOST is not None
    first = make_supervisor()
    handle = _command(first, "true")
    wait_state(workspace, handle.task_id, "succeeded")
    first.stop()  # its run's end may not be seen yet: then its cgroup is left
    left = HOST.find(f"{TASK_PREFIX}{handle.run_id}")
    if left is None:  # it was seen: make the cgroup as a crash would have left it
        left = HOST.create(f"{TASK_PREFIX}{handle.run_id}", Limits())
    made.append(left)
    wait_until(lambda: all(map(is_empty, left.folders.values())))  # the worker has exited
    stranger = make(made, TASK_PREFIX)  # young, and no record of this workspace names it
    make_supervisor()
    wait_until(lambda: not left.exists(), timeout=5)
    assert present(stranger)
    assert stranger in run_cgroups(HOST)
