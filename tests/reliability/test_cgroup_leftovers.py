"""Runs that end while no server watches leave no cgroup once a server starts again.

Real servers on 127.0.0.1, real workers and the machine's real cgroups: a server is killed
with -9 while its runs go on, they end with nobody watching (as does a ``runyard run
--detach`` made meanwhile), and the next server's start removes their cgroups within
seconds of answering, while a run still alive keeps its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from reliability_helpers import disk_status, submit, until, wait_cmd

from runyard.executors.cgroups import CgroupHost, detect_host
from runyard.executors.containment import task_cgroup_name
from serverproc import ServerProcess, kill_strays, start_server

HOST = detect_host()
pytestmark = pytest.mark.skipif(HOST is None, reason="no writable cgroup here")
FINAL = {"succeeded", "failed", "cancelled"}
ENDED_WHILE_DOWN = 3
SWEPT_WITHIN = 10.0  # seconds after the restarted server answers (about 3 on a busy machine)


def runyard_cgroups(host: CgroupHost) -> set[str]:
    """What ``ls <cgroup parent> | grep runyard`` shows, over every hierarchy runyard uses."""
    return {name for base in host.bases.values() for name in os.listdir(base) if "runyard" in name}


def command(server: ServerProcess, line: str) -> dict[str, str]:
    return submit(server, task="command", command=line, shell=True, artifacts="")


def detached_run(server: ServerProcess, line: str) -> str:
    """``runyard run --detach`` in the server's workspace (found through its server.json)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    done = subprocess.run(
        [sys.executable, "-m", "runyard", "run", "command", f"command={json.dumps(line)}",
         "shell=true", 'artifacts=""', "--detach", "--json",
         "--workspace-dir", str(server.workspace), "--log-dir", str(server.log_dir)],
        cwd=server.root, env=env, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    handle: dict[str, str] = json.loads(done.stdout)
    return handle["task_id"]


def ended(server: ServerProcess, task_id: str) -> bool:
    status = disk_status(server.workspace, task_id)
    return status is not None and status["state"] in FINAL


def test_runs_ended_while_no_server_ran_leave_no_cgroup_after_a_restart(tmp_path: Path) -> None:
    assert HOST is not None
    release, keep = tmp_path / "release", tmp_path / "keep"
    server = start_server(tmp_path / "srv", config={"max_concurrent_tasks": 8})
    restarted = None
    try:
        handles = [command(server, wait_cmd(release)) for _ in range(ENDED_WHILE_DOWN)]
        live = command(server, wait_cmd(keep))
        until(lambda: all(disk_status(server.workspace, h["task_id"])["state"] == "running"
                          for h in [*handles, live]))  # fmt: skip
        server.stop(signal.SIGKILL, keep_runs=True)

        # with no server answering, a detached run is launched by the CLI itself
        detached = detached_run(server, wait_cmd(release))
        detached_run_id = disk_status(server.workspace, detached)["run_id"]
        until(lambda: disk_status(server.workspace, detached)["state"] == "running")
        release.touch()  # these runs end now, watched by nobody
        ended_ids = [*(h["task_id"] for h in handles), detached]
        until(lambda: all(ended(server, task_id) for task_id in ended_ids))
        ended_cgroups = {task_cgroup_name(h["run_id"]) for h in handles}
        ended_cgroups.add(task_cgroup_name(detached_run_id))
        live_cgroup = task_cgroup_name(live["run_id"])
        assert ended_cgroups | {live_cgroup} <= runyard_cgroups(HOST)  # left behind

        restarted = start_server(tmp_path / "srv", wait_ready=False)
        answered = time.monotonic()
        until(lambda: not ended_cgroups & runyard_cgroups(HOST), timeout=SWEPT_WITHIN)
        took = time.monotonic() - answered
        assert live_cgroup in runyard_cgroups(HOST)  # a live run keeps its cgroup
        assert disk_status(server.workspace, live["task_id"])["state"] == "running"
        print(f"ended runs' cgroups gone {took:.2f} s after the server answered")

        keep.touch()
        until(lambda: ended(server, live["task_id"]))
        until(lambda: live_cgroup not in runyard_cgroups(HOST), timeout=SWEPT_WITHIN)
    finally:
        release.touch()
        keep.touch()
        for running in (restarted, server):
            if running is not None:
                running.stop()
        kill_strays(tmp_path)
