"""The supervisor: FIFO queue, restart, adoption, dead workers, notifications."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from runtime_helpers import held_elsewhere, wait_state, wait_until

from runyard.runtime.launch import run_task
from runyard.runtime.liveness import settle, wait_for_run, worker_alive
from runyard.runtime.supervisor import Supervisor, TaskHandle


def finish(ws, handle: TaskHandle, timeout: float = 30):
    return wait_for_run(ws, handle.task_id, handle.run_id, poll_interval=0.05, timeout=timeout)


def test_submit_runs_demo_and_notifies(settings, workspace, registry):
    changes: list[str] = []
    sup = Supervisor(settings, workspace, registry, on_change=changes.append)
    sup.start()
    try:
        handle = sup.submit("demo", {"x": 1, "y": 2})
        status = finish(workspace, handle)
        wait_until(lambda: sup.active_count() == 0)
    finally:
        sup.stop()
    assert status.state == "succeeded" and status.result["result"] == 3
    assert handle.task == "demo" and handle.task_id.startswith("base#demo#")
    assert changes.count(handle.task_id) >= 2  # queued, then the end of the worker


def test_fifo_queue_with_one_slot(make_supervisor, workspace):
    sup = make_supervisor(max_concurrent_tasks=1)
    handles = [sup.submit("sleepy", {"seconds": 0.2}) for _ in range(3)]
    assert sup.active_count() == 3
    finals = [finish(workspace, handle) for handle in handles]

    assert [s.state for s in finals] == ["succeeded"] * 3
    for before, after in zip(finals, finals[1:], strict=False):
        assert before.created_at < after.created_at
        assert before.finished_at <= after.started_at


def test_queued_work_survives_a_restart(make_supervisor, workspace):
    first = make_supervisor(max_concurrent_tasks=1)
    running = first.submit("sleepy", {"seconds": 30})
    queued = [first.submit("demo", {"x": n, "y": 1}) for n in range(2)]
    wait_state(workspace, running.task_id, "running")
    first.stop()
    assert worker_alive(workspace, running.task_id)
    assert workspace.read_status(queued[0].task_id).state == "queued"

    second = make_supervisor(max_concurrent_tasks=1)
    assert second.active_count() == 3
    assert second.cancel(running.task_id)  # a worker the first supervisor started
    cancelled = finish(workspace, running)
    finals = [finish(workspace, handle) for handle in queued]

    assert cancelled.state == "cancelled" and cancelled.exit_code == 130
    assert [s.state for s in finals] == ["succeeded", "succeeded"]
    assert finals[0].started_at < finals[1].started_at


def test_kill_9_mid_step_fails_with_signal_and_log_tail(supervisor, workspace):
    handle = supervisor.submit("sleepy", {"seconds": 30})
    running = wait_state(workspace, handle.task_id, "running")
    wait_until(lambda: "sleeping" in Path(running.log_path).read_text())
    os.kill(running.pid, signal.SIGKILL)

    status = finish(workspace, handle)
    assert status.state == "failed" and status.exit_code == 137
    assert "signal 9" in status.error and "sleeping 30.0" in status.error
    assert status.steps[0].name == "sleep" and status.steps[0].finished_at is None


def test_settle_finds_a_dead_worker_without_a_supervisor(settings, workspace, registry):
    handle = run_task(settings, workspace, registry, "sleepy", {"seconds": 30}, detach=True)
    running = wait_state(workspace, handle.task_id, "running")
    wait_until(lambda: "sleeping" in Path(running.log_path).read_text())
    assert settle(workspace, running) is running

    os.kill(running.pid, signal.SIGKILL)
    os.waitpid(running.pid, 0)
    status = settle(workspace, workspace.read_status(handle.task_id))

    assert status.state == "failed" and status.finished_at
    assert "exit status unknown" in status.error and "sleeping 30.0" in status.error
    assert workspace.read_status(handle.task_id) == status


def test_start_fails_dead_running_tasks(make_supervisor, workspace, settings, registry):
    handle = run_task(settings, workspace, registry, "sleepy", {"seconds": 30}, detach=True)
    running = wait_state(workspace, handle.task_id, "running")
    os.kill(running.pid, signal.SIGKILL)
    os.waitpid(running.pid, 0)
    assert workspace.read_status(handle.task_id).state == "running"

    changes: list[str] = []
    sup = make_supervisor(start=False)
    sup._on_change = changes.append
    sup.start()

    assert workspace.read_status(handle.task_id).state == "failed"
    assert changes == [handle.task_id] and sup.active_count() == 0


def test_adopted_worker_is_settled_when_it_ends(make_supervisor, workspace, settings, registry):
    handle = run_task(settings, workspace, registry, "sleepy", {"seconds": 0.5}, detach=True)
    sup = make_supervisor()
    wait_state(workspace, handle.task_id, "running")
    status = finish(workspace, handle)
    assert status.state == "succeeded"
    wait_until(lambda: sup.active_count() == 0)


def test_submit_is_thread_safe(make_supervisor, workspace):
    sup = make_supervisor(max_concurrent_tasks=3, prefork=True)
    handles: list[TaskHandle] = []
    lock = threading.Lock()

    def submit(n: int) -> None:
        handle = sup.submit("demo", {"x": n, "y": 0})
        with lock:
            handles.append(handle)

    threads = [threading.Thread(target=submit, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    finals = [finish(workspace, handle) for handle in handles]
    assert sorted(s.result["result"] for s in finals) == list(range(8))


def test_broken_folders_do_not_disturb_start(make_supervisor, workspace, tmp_path):
    base = workspace.type_dir("base")
    (base / "base#demo#empty").mkdir()
    (base / "base#demo#corrupt").mkdir()
    (base / "base#demo#corrupt" / "status.json").write_text('{"state": "running", "task_')
    (base / "base#demo#linked").mkdir()
    (tmp_path / "elsewhere.json").write_text('{"task_id": "base#demo#linked", "state": "queued"}')
    (base / "base#demo#linked" / "status.json").symlink_to(tmp_path / "elsewhere.json")
    (base / "not-a-task").mkdir()

    sup = make_supervisor()
    assert sup.active_count() == 0
    handle = sup.submit("demo", {"x": 1, "y": 2, "task_name": "corrupt"})
    assert finish(workspace, handle).state == "succeeded"


def test_a_task_folder_locked_by_someone_else_holds_up_neither_its_run_nor_the_supervisor(
    make_supervisor, workspace
):
    """Anyone who may read a task folder may flock it. The supervisor's hold on a run is a
    shared lock on that folder; an exclusive lock taken there first (by another process,
    while the task waits in the queue) must not stall the launch, which runs under the
    supervisor's lock: the run goes on without the hold, and submits are answered."""
    sup = make_supervisor(max_concurrent_tasks=1)
    first = sup.submit("sleepy", {"seconds": 30})
    wait_state(workspace, first.task_id, "running")
    queued = sup.submit("demo", {"x": 1, "y": 2})
    with held_elsewhere(workspace.task_dir(queued.task_id), "exclusive"):
        assert sup.cancel(first.task_id)
        assert finish(workspace, first).state == "cancelled"
        assert finish(workspace, queued, timeout=20).state == "succeeded"
        answered: list[TaskHandle] = []
        submitter = threading.Thread(
            target=lambda: answered.append(sup.submit("demo", {"x": 2, "y": 2})), daemon=True
        )
        started = time.monotonic()
        submitter.start()
        submitter.join(20)
        assert answered, f"a submit was not answered in {time.monotonic() - started:.0f} s"
        assert finish(workspace, answered[0]).state == "succeeded"
