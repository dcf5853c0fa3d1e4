"""Fair shares: one agent run cannot take every task slot, fill the disk, or stay `running`
after its process is gone. Real servers, real bubblewrap sandboxes, real runs."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from agent_helpers import wait_done
from agent_support import PACKAGES, needs_bwrap
from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run

from runyard.agents.runs import RunRequest
from runyard.api.agentservice import AgentService
from runyard.config import ResourceLimits
from runyard.executors.cgroups import detect_host
from runyard.executors.containment import agent_cgroup_name
from runyard.runtime.sandboxfiles import sandbox_dir
from runyard.wire import TaskState
from runyard.workspace.layout import Workspace
from serverproc import ServerProcess, start_server, until

pytestmark = [pytest.mark.sandbox, needs_bwrap]

WAIT_FOR_GO = "while [ ! -e go ]; do sleep 0.05; done"  # in the task's own folder



def state_of(server: ServerProcess, task_id: str) -> str:
    return str(server.call("status", task_id=task_id)["answer"]["state"])


def states(server: ServerProcess, task_ids: list[str]) -> list[str]:
    return [state_of(server, task_id) for task_id in task_ids]


def holding_run(client: httpx.Client, session_id: str) -> tuple[str, str]:
    """A run that keeps its token alive until ``state/release`` exists: (run id, token)."""
    calls = [["hold", "GET", "release", None]]
    run = create_run(client, session_id, json.dumps(calls), package="scope_probe")
    return run["id"], wait_file(client, run["id"], "token", timeout=60).decode()


def submit_as(server: ServerProcess, token: str, name: str, command: str) -> str:
    arguments = {"task": "command", "task_name": name, "command": command, "shell": True}
    with httpx.Client(base_url=server.url, timeout=30) as tcp:
        reply = tcp.post(
            "/jobs/submit",
            json={"arguments": arguments},
            headers={"authorization": f"Bearer {token}"},
        )
    assert reply.status_code == 200, reply.text
    return str(reply.json()["answer"]["task_id"])


@pytest.fixture
def slots_server(tmp_path: Path) -> Iterator[ServerProcess]:
    config = {"max_concurrent_tasks": 3, "agent_task_slots": 2, "cancel_grace_seconds": 1.0}
    server = agent_server(tmp_path / "srv", "bwrap", **config)
    try:
        yield server
    finally:
        server.stop()


def test_one_runs_backlog_takes_its_share_and_never_holds_up_an_admin_task(
    slots_server: ServerProcess,
) -> None:
    """The run floods the queue; the admin task submitted after its backlog (with a slot
    free) starts at once, the run never holds more than its two slots, and its queued tasks
    start one by one as its running ones end."""
    server = slots_server
    workspace = Workspace(server.workspace, server.log_dir)
    with api(server, timeout=120) as client:
        session = new_session(client, "flood")
        run_id, token = holding_run(client, session)
        flood = [submit_as(server, token, f"flood-{i}", WAIT_FOR_GO) for i in range(5)]
        until(lambda: states(server, flood[:2]) == ["running", "running"])
        time.sleep(0.5)  # the third slot is free: the run's third task must not take it
        assert states(server, flood[2:]) == ["queued"] * 3

        admin = server.call("submit", task="command", task_name="admin", command="sleep 30")
        admin_id = admin["answer"]["task_id"]
        submitted = time.monotonic()
        until(lambda: state_of(server, admin_id) == "running", timeout=1.0)
        assert time.monotonic() - submitted < 1.0
        assert states(server, flood) == ["running"] * 2 + ["queued"] * 3

        release(workspace, flood[0])
        until(lambda: state_of(server, flood[0]) == "succeeded")
        until(lambda: state_of(server, flood[2]) == "running")
        assert states(server, flood[1:]) == ["running", "running", "queued", "queued"]

        for task_id in flood:
            until(lambda t=task_id: state_of(server, t) != "queued", timeout=60)  # type: ignore[misc]
            release(workspace, task_id)
        until(lambda: all(s == "succeeded" for s in states(server, flood)), timeout=60)
        server.call("cancel", task_id=admin_id)
        (workspace.root / "agent" / "session-state" / session / "release").write_text("go")
        assert wait_run(client, run_id)["state"] == "succeeded"


def release(workspace: Workspace, task_id: str) -> None:
    """Let a waiting task end: its ``go`` file, in the folder its sandbox sees as its own
    (gone, with nothing to release, once it has ended)."""
    with contextlib.suppress(FileNotFoundError):
        (sandbox_dir(workspace.task_dir(task_id)) / "go").touch()


def processes_with(variable: str, value: str) -> list[int]:
    """Host processes whose environment sets ``variable=value`` (a run's or a task's)."""
    wanted = f"{variable}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if wanted in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("folder", ["out", "tmp", "state"])
def test_a_run_writing_past_its_disk_quota_fails_alone(
    make_service: Callable[..., AgentService], folder: str
) -> None:
    service = make_service("bwrap", agent_limits=ResourceLimits(disk_mb=5))
    session = service.catalog.create_session("filler")
    run = service.runs.create(RunRequest(session.id, f"{folder} 50 30", package="disk_fill"))
    until(lambda: service.runs.run(run.id).state == TaskState.RUNNING)
    began = time.monotonic()
    done = wait_done(service, run.id, timeout=15)
    assert time.monotonic() - began < 6, "stopped only after its writes were over"
    assert done.state == TaskState.FAILED, done
    assert re.fullmatch(
        r"disk quota exceeded: \d+\.\d MB written, limit 5 MB \(agent_limits\.disk_mb\)",
        done.error,
    ), done.error
    assert until(lambda: not processes_with("RUNYARD_RUN_ID", run.id), timeout=5)
    host = detect_host()
    assert host is None or host.find(agent_cgroup_name(run.id)) is None

    other = service.catalog.create_session("modest")
    fine = service.runs.create(RunRequest(other.id, f"{folder} 2 0", package="disk_fill"))
    assert wait_done(service, fine.id, timeout=60).state == TaskState.SUCCEEDED


FILL_TASK_FOLDER = (
    "i=0; while [ $i -lt 50 ]; do "
    "dd if=/dev/zero of=fill.bin bs=1M count=1 seek=$i conv=notrunc,fsync 2>/dev/null; "
    "i=$((i+1)); sleep 0.02; done; sleep 30"
)


def test_a_run_cannot_write_past_its_quota_through_its_tasks(tmp_path: Path) -> None:
    """The run itself writes nothing; the task it submits fills its own folder. Both stop,
    failed with the quota's error, and the server goes on running other work."""
    config = {"agent_limits": {"disk_mb": 5}, "cancel_grace_seconds": 1.0}
    server = agent_server(tmp_path / "srv", "bwrap", **config)
    try:
        with api(server, timeout=120) as client:
            session = new_session(client, "through-tasks")
            run_id, token = holding_run(client, session)
            task_id = submit_as(server, token, "filler", FILL_TASK_FOLDER)
            until(lambda: state_of(server, task_id) == "running")
            done = wait_run(client, run_id, timeout=15)
            assert done["state"] == "failed", done
            assert done["error"].startswith("disk quota exceeded: "), done
            until(lambda: state_of(server, task_id) == "failed", timeout=10)
            task = server.call("status", task_id=task_id)["answer"]
            assert task["error"] == done["error"], task
            assert until(lambda: not processes_with("RUNYARD_TASK_ID", task_id), timeout=5)
            assert until(lambda: not processes_with("RUNYARD_RUN_ID", run_id), timeout=5)
            admin = server.call("submit", task="command", task_name="after", command="true")
            final = server.call("stream_task", task_id=admin["answer"]["task_id"])["answer"]
            assert final["state"] == "succeeded", final
    finally:
        server.stop()


def stored_state(server: ServerProcess, run_id: str) -> str:
    """The state the store keeps (what a restarted server would read), not what is served."""
    db = sqlite3.connect(f"file:{server.workspace / 'agent' / 'state.db'}?mode=ro", uri=True)
    try:
        return str(db.execute("SELECT state FROM runs WHERE id = ?", (run_id,)).fetchone()[0])
    finally:
        db.close()


def test_a_run_whose_end_cannot_be_written_frees_its_slot_and_is_recorded_later(
    tmp_path: Path,
) -> None:
    flag = tmp_path / "disk-full"
    flag.touch()
    fault = {"RUNYARD_FAULT_ENOSPC": f"run.settle:{flag}"}
    config = {"agent_packages_dir": str(PACKAGES), "agent_sandbox": "bwrap"}
    server = start_server(tmp_path / "srv", config={**config, "max_concurrent_runs": 1}, env=fault)
    try:
        with api(server, timeout=120) as client:
            first = create_run(client, new_session(client, "a"), "[]", package="scope_probe")
            served = wait_run(client, first["id"], timeout=60)
            assert served["state"] == "succeeded", served  # served from memory...
            time.sleep(1.0)  # ...through a few failed retries
            assert stored_state(server, first["id"]) == "running"  # ...not yet on record

            second = create_run(client, new_session(client, "b"), "[]", package="scope_probe")
            assert wait_run(client, second["id"], timeout=60)["state"] == "succeeded"

            flag.unlink()  # space freed: both ends are written
            until(lambda: stored_state(server, first["id"]) == "succeeded", timeout=15)
            until(lambda: stored_state(server, second["id"]) == "succeeded", timeout=15)
            history = client.get(f"/sessions/{first['sessionId']}").json()["history"]
            assert [turn["role"] for turn in history] == ["user", "assistant"], history
    finally:
        server.stop()
