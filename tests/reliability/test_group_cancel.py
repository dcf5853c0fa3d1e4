"""Cancel kills the whole process group of a run the server did not launch itself: a task
started by ``runyard run --detach``, a task adopted after a server restart, an agent run
adopted after a restart. Each run leaves children in its group; after the cancel, no
process of that group is alive.

The children are moved out of the run's cgroup first (into this test's own): the cgroup
sweep no longer finds them, so only the signal to the process group can end them. A cancel
that signalled the leader alone, or relied on the cgroup, leaves them running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from reliability_helpers import until

from runyard.executors.cgroups import cgroup_mounts, own_cgroups
from runyard.workspace.layout import Workspace
from serverproc import ServerProcess, start_server

JSON = {"content-type": "application/json"}
# the command task's shell runs in the worker's group; so do both sleeps it starts
FAMILY = "sleep 300 & sleep 301; wait"


def group_members(pgid: int) -> list[int]:
    """Every live (not zombie) process whose process group is ``pgid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        if fields[0] != b"Z" and int(fields[2]) == pgid:
            found.append(int(entry))
    return found


def leave_run_cgroups(pids: list[int]) -> None:
    """Move ``pids`` into this test's own cgroups, in every hierarchy (we run as root)."""
    own = own_cgroups(Path("/proc/self/cgroup"))
    mounts = cgroup_mounts(Path("/proc/self/mountinfo"))
    for controller, path in own.items():
        if controller not in mounts:
            continue
        mount, root = mounts[controller]
        relative = path[len(root) :] if root != "/" and path.startswith(root) else path
        procs = mount / relative.lstrip("/") / "cgroup.procs"
        for pid in pids:
            with contextlib.suppress(OSError):
                procs.write_text(str(pid))
    mine = Path("/proc/self/cgroup").read_text()
    for pid in pids:
        assert Path(f"/proc/{pid}/cgroup").read_text() == mine, f"{pid} is still contained"


@contextlib.contextmanager
def reaped(pgid_of: list[int]) -> Iterator[None]:
    """Whatever the outcome, no process of the watched group outlives the test."""
    try:
        yield
    finally:
        for pgid in pgid_of:
            if group_members(pgid):  # only a failed cancel leaves any
                with contextlib.suppress(OSError):
                    os.killpg(pgid, signal.SIGKILL)


def detached_task(server: ServerProcess) -> str:
    """Start a ``command`` task with ``runyard run --detach`` beside the server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    env.update(RUNYARD_WORKSPACE_DIR=str(server.workspace), RUNYARD_LOG_DIR=str(server.log_dir))
    started = subprocess.run(
        [sys.executable, "-m", "runyard", "run", "command", f"command={FAMILY}", "shell=true",
         "--detach"],
        capture_output=True, text=True, timeout=60, env=env, cwd=server.root,
    )  # fmt: skip
    assert started.returncode == 0, started.stdout + started.stderr
    return started.stdout.strip().splitlines()[-1]


def worker_group(server: ServerProcess, task_id: str) -> int:
    """The worker's pid (its group id) once the worker and both sleeps run; all but the
    worker have left the run's cgroup."""
    workspace = Workspace.open(server.workspace, server.log_dir)

    def ready() -> int | None:
        status = workspace.read_status(task_id)
        pid = status.pid if status is not None else None
        return pid if pid and len(group_members(pid)) >= 4 else None

    pgid = int(until(ready))
    leave_run_cgroups([pid for pid in group_members(pgid) if pid != pgid])
    return pgid


def cancel_task(server: ServerProcess, task_id: str) -> None:
    reply = server.call("cancel", task_id=task_id)
    assert reply["success"] is True and reply["answer"] is True, reply


def state_of(server: ServerProcess, task_id: str) -> str:
    status = Workspace.open(server.workspace, server.log_dir).read_status(task_id)
    assert status is not None
    return status.state


def test_cancel_of_a_detached_task_kills_its_whole_group(tmp_path: Path) -> None:
    groups: list[int] = []
    server = start_server(tmp_path)
    with reaped(groups):
        try:
            task_id = detached_task(server)
            groups.append(worker_group(server, task_id))
            cancel_task(server, task_id)
            until(lambda: not group_members(groups[0]), timeout=20)
            until(lambda: state_of(server, task_id) == "cancelled")
        finally:
            server.stop()


def test_cancel_of_a_task_adopted_after_a_restart_kills_its_whole_group(tmp_path: Path) -> None:
    groups: list[int] = []
    server = start_server(tmp_path)
    with reaped(groups):
        try:
            task_id = detached_task(server)
            groups.append(worker_group(server, task_id))
        finally:
            server.stop(keep_runs=True)
        assert len(group_members(groups[0])) >= 4  # the workers outlive the server
        again = start_server(tmp_path)
        try:
            cancel_task(again, task_id)
            until(lambda: not group_members(groups[0]), timeout=20)
            until(lambda: state_of(again, task_id) == "cancelled")
        finally:
            again.stop()


def start_agent_run(server: ServerProcess, prompt: str) -> str:
    with server.client() as client:
        session = client.post("/api/v1/sessions", json={"title": "g"}, headers=JSON)
        assert session.status_code == 201, session.text
        body = {"sessionId": session.json()["id"], "userPrompt": prompt, "package": "probe"}
        run = client.post("/api/v1/runs", json=body, headers=JSON)
        assert run.status_code == 201, run.text
    return str(run.json()["id"])


def test_cancel_of_an_agent_run_adopted_after_a_restart_kills_its_whole_group(
    tmp_path: Path,
) -> None:
    packages = Path(__file__).parents[1] / "agents" / "packages"
    config = {"agent_packages_dir": str(packages), "agent_sandbox": "none",
              "cancel_grace_seconds": 1.0}  # fmt: skip
    groups: list[int] = []
    server = start_server(tmp_path, config=config)
    with reaped(groups):
        try:
            run_id = start_agent_run(server, "child 300\nsleep 301")
            out = server.workspace / "agent" / "workspaces" / run_id / "out"
            child = int(
                until(lambda: (out / "child.pid").exists() and (out / "child.pid").read_text())
            )
            groups.append(os.getpgid(child))
            members = group_members(groups[0])
            assert groups[0] != child and len(members) >= 3  # recorder, agent, child
            leave_run_cgroups([pid for pid in members if pid != groups[0]])
        finally:
            server.stop(keep_runs=True)
        again = start_server(tmp_path, config=config)
        try:
            with again.client() as client:
                reply = client.post(f"/api/v1/runs/{run_id}/cancel", headers=JSON)
            assert reply.status_code == 200, reply.text
            assert reply.json()["state"] == "cancelled"
            until(lambda: not group_members(groups[0]), timeout=20)
        finally:
            again.stop()
