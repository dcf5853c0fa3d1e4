"""Nothing a task starts outlives it, and task_limits hold: real workers, real cgroups."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from runtime_helpers import wait_state, wait_until

from runyard.config import ResourceLimits
from runyard.executors.cgroups import detect_host
from runyard.executors.containment import task_cgroup_name
from runyard.runtime.liveness import worker_alive
from runyard.workspace.layout import Workspace

ESCAPE = "setsid sleep 300 & echo $! > child.pid"


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def child_pid(ws: Workspace, task_id: str) -> int:
    path = ws.task_dir(task_id) / "child.pid"
    wait_until(lambda: path.exists() and path.read_text().strip())
    return int(path.read_text())


def cgroup_gone(run_id: str) -> bool:
    host = detect_host()
    assert host is not None
    return host.find(task_cgroup_name(run_id)) is None


def command(sup, line: str, **extra: object):  # type: ignore[no-untyped-def]
    return sup.submit("command", {"command": line, "shell": True, "artifacts": "", **extra})


@pytest.mark.parametrize("prefork", [False, True])
def test_a_setsid_child_dies_when_its_task_ends(make_supervisor, workspace, prefork):
    sup = make_supervisor(prefork=prefork)
    handle = command(sup, ESCAPE)
    wait_state(workspace, handle.task_id, "succeeded")
    pid = child_pid(workspace, handle.task_id)
    try:
        wait_until(lambda: not alive(pid), timeout=5)
    finally:
        if alive(pid):
            os.kill(pid, 9)
    wait_until(lambda: cgroup_gone(handle.run_id), timeout=5)
    assert workspace.read_status(handle.task_id).limits is None  # no limits configured


def test_a_setsid_child_dies_when_its_task_is_cancelled(make_supervisor, workspace):
    sup = make_supervisor(prefork=True)
    handle = command(sup, f"{ESCAPE}; sleep 300")
    pid = child_pid(workspace, handle.task_id)
    try:
        assert sup.cancel(handle.task_id)
        wait_state(workspace, handle.task_id, "cancelled")
        wait_until(lambda: not alive(pid), timeout=5)
    finally:
        if alive(pid):
            os.kill(pid, 9)


def test_an_adopted_task_is_ended_with_its_cgroup_after_a_restart(make_supervisor, workspace):
    first = make_supervisor(prefork=False)
    handle = command(first, f"{ESCAPE}; sleep 300")
    pid = child_pid(workspace, handle.task_id)
    first.stop()  # its worker runs on; the next supervisor adopts it
    try:
        second = make_supervisor(prefork=False)
        assert second.cancel(handle.task_id)
        wait_state(workspace, handle.task_id, "cancelled")
        wait_until(lambda: not alive(pid), timeout=5)
        wait_until(lambda: cgroup_gone(handle.run_id), timeout=5)
    finally:
        if alive(pid):
            os.kill(pid, 9)


@pytest.mark.parametrize("prefork", [False, True])
def test_task_limits_stop_a_task_allocating_past_them(make_supervisor, workspace, prefork):
    sup = make_supervisor(prefork=prefork, task_limits=ResourceLimits(memory_mb=256))
    hog = "python3 -c 'bytearray(1 << 30); print(\"allocated\")'"
    handle = command(sup, hog)
    final = wait_state(workspace, handle.task_id, "failed", timeout=60)
    assert "allocated" not in Path(final.log_path).read_text()
    assert final.limits["memory_mb"] == 256
    assert final.limits["cgroup"] == task_cgroup_name(handle.run_id)
    host = detect_host()  # cgroup v1 or v2, whichever this machine has
    by = host.version if "memory" in host.limitable else "rlimit"
    assert final.limits["kill"] == host.version
    assert final.limits["enforced_by"] == by and final.limits["by"] == {"memory_mb": by}


def test_a_task_within_its_limits_succeeds_and_keeps_the_record(make_supervisor, workspace):
    sup = make_supervisor(prefork=True, task_limits=ResourceLimits(memory_mb=256, pids=64))
    handle = command(sup, "python3 -c 'bytearray(32 << 20)'")
    final = wait_state(workspace, handle.task_id, "succeeded", timeout=60)
    host = detect_host()
    by = {host.version if res in host.limitable else "rlimit" for res in ("memory", "pids")}
    assert final.limits["pids"] == 64 and final.limits["enforced_by"] == "+".join(sorted(by))


def test_a_restart_kills_what_a_dead_worker_left_in_its_cgroup(make_supervisor, workspace):
    first = make_supervisor(prefork=False)
    handle = command(first, f"{ESCAPE}; sleep 300")
    pid = child_pid(workspace, handle.task_id)
    first.stop()  # its worker runs on, then dies; its setsid child stays in the cgroup
    worker = workspace.read_status(handle.task_id).pid
    assert worker is not None
    os.kill(worker, 9)
    # gone once its lock is free: the main thread of a worker with threads shows as a zombie
    # while another of its threads still exits holding the lock, and a restart at that
    # moment rightly finds a live worker to adopt
    wait_until(lambda: not worker_alive(workspace, handle.task_id), timeout=5)
    try:
        assert alive(pid) and not cgroup_gone(handle.run_id)
        make_supervisor(prefork=False)  # reconciles the running task whose worker is gone
        assert cgroup_gone(handle.run_id)  # swept during the start
        # killed, and out of the cgroup (the kernel takes a process out as it starts to
        # exit), but a loaded machine may run its last steps a moment later
        wait_until(lambda: not alive(pid), timeout=5)
        assert workspace.read_status(handle.task_id).state == "failed"
    finally:
        if alive(pid):
            os.kill(pid, 9)


def test_a_foreground_run_leaves_no_cgroup_behind(tmp_path):
    """``runyard run`` exits once the final status is written; its reaper thread used to
    die with it before removing the worker's cgroup, one left behind per run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    done = subprocess.run(
        [sys.executable, "-m", "runyard", "run", "demo", "x=1", "y=2", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    assert cgroup_gone(run_id)
