"""A supervisor started beside a built index (as a server starts it) takes the unfinished
and the record-less tasks from the index: queued work runs, dead runs are recorded failed,
half-made folders go, as when it reads every folder."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

from runtime_helpers import wait_state, wait_until

from runyard.config import Settings
from runyard.repository import TaskRepository
from runyard.runtime.launch import run_task
from runyard.runtime.liveness import wait_for_run
from runyard.runtime.supervisor import Supervisor
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace


def test_start_from_the_index_runs_queued_work_and_settles_dead_runs(
    make_supervisor: Callable[..., Supervisor],
    workspace: Workspace,
    settings: Settings,
    registry: TaskRegistry,
) -> None:
    dead = run_task(settings, workspace, registry, "sleepy", {"seconds": 30}, detach=True)
    running = wait_state(workspace, dead.task_id, "running")
    os.kill(running.pid, signal.SIGKILL)
    os.waitpid(running.pid, 0)
    first = make_supervisor(start=False, max_concurrent_tasks=1)
    queued = [first.submit("sleepy", {"seconds": 0.1}) for _ in range(3)]  # never launched
    base = workspace.type_dir("base")
    (base / "base#sleepy#recordless").mkdir()
    (base / ".staging-0123456789ab-base#sleepy#half").mkdir()  # as earlier versions built
    staged = workspace.staging_dir / ".staging-0123456789ab-base#sleepy#staged"
    staged.mkdir(parents=True)
    (staged / "status.json").write_text("{}")
    (base / ".removing-0123456789ab-base#sleepy#gone").mkdir()

    with TaskRepository(workspace) as repo:
        second = make_supervisor(start=False, max_concurrent_tasks=1)
        second.known_tasks = repo
        second.start()
        finals = [
            wait_for_run(workspace, h.task_id, h.run_id, poll_interval=0.05, timeout=30)
            for h in queued
        ]
        wait_until(lambda: second.active_count() == 0)

    assert [status.state.value for status in finals] == ["succeeded"] * 3
    assert finals[0].finished_at <= finals[1].started_at  # oldest first, one at a time
    assert finals[1].finished_at <= finals[2].started_at
    status = workspace.read_status(dead.task_id)
    assert status is not None and status.state.value == "failed"
    assert not (base / "base#sleepy#recordless").exists()
    assert not (base / ".staging-0123456789ab-base#sleepy#half").exists()
    assert not staged.exists() and not workspace.task_dir("base#sleepy#staged").exists()
    assert not (base / ".removing-0123456789ab-base#sleepy#gone").exists()
