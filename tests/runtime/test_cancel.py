"""Cancelling queued and running tasks, whoever started them."""

from __future__ import annotations

import time
from pathlib import Path

from runtime_helpers import wait_state, wait_until

from runyard.runtime.creation import create_task
from runyard.runtime.launch import run_task
from runyard.runtime.liveness import wait_for_run, worker_alive


def test_cancel_running_task_from_this_supervisor(supervisor, workspace):
    handle = supervisor.submit("command", {"command": "sleep 30"})
    wait_state(workspace, handle.task_id, "running")

    assert supervisor.cancel(handle.task_id)
    assert not supervisor.cancel(handle.task_id)  # already being cancelled
    status = wait_for_run(workspace, handle.task_id, handle.run_id, 0.05, timeout=30)

    assert status.state == "cancelled" and status.exit_code == 130, status.error
    assert status.error == "Cancelled"
    wait_until(lambda: not worker_alive(workspace, handle.task_id))


def test_cancel_detached_run_from_a_supervisor_that_never_started(
    make_supervisor, workspace, settings, registry
):
    handle = run_task(settings, workspace, registry, "sleepy", {"seconds": 30}, detach=True)
    wait_state(workspace, handle.task_id, "running")

    assert make_supervisor(start=False).cancel(handle.task_id)
    status = workspace.read_status(handle.task_id)  # the call waited for the end
    assert status.state == "cancelled" and status.exit_code == 130
    assert "cancelled" in Path(status.log_path).read_text()


def test_cancel_queued_task_never_launches_it(make_supervisor, workspace):
    sup = make_supervisor(max_concurrent_tasks=1)
    blocker = sup.submit("sleepy", {"seconds": 30})
    queued = sup.submit("demo", {"x": 1, "y": 2})

    assert sup.cancel(queued.task_id)
    assert sup.active_count() == 1
    status = workspace.read_status(queued.task_id)
    assert status.state == "cancelled" and status.exit_code == 130
    assert status.started_at is None and status.finished_at
    assert not Path(status.log_path).exists()
    assert sup.cancel(blocker.task_id)


def test_cancel_queued_task_of_nobody_in_particular(make_supervisor, workspace, registry):
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
    assert make_supervisor(start=False).cancel(status.task_id)
    assert workspace.read_status(status.task_id).state == "cancelled"


def test_cancel_finished_missing_or_invalid_is_false(supervisor, workspace):
    handle = supervisor.submit("demo", {"x": 1, "y": 2})
    wait_for_run(workspace, handle.task_id, handle.run_id, 0.05, timeout=30)

    assert not supervisor.cancel(handle.task_id)
    assert not supervisor.cancel("base#demo#missing")
    assert not supervisor.cancel("not an id")
    assert workspace.read_status(handle.task_id).state == "succeeded"


def test_worker_ignoring_sigterm_is_killed_after_the_grace(make_supervisor, workspace):
    sup = make_supervisor(cancel_grace_seconds=0.3)
    handle = sup.submit("sleepy", {"seconds": 30, "ignore_term": True})
    wait_state(workspace, handle.task_id, "running")
    time.sleep(0.2)  # let the task install its SIG_IGN

    started = time.monotonic()
    assert sup.cancel(handle.task_id)
    status = wait_for_run(workspace, handle.task_id, handle.run_id, 0.05, timeout=30)

    assert status.state == "cancelled" and status.exit_code == 130
    assert 0.3 <= time.monotonic() - started < 5


def test_cancel_reaches_the_current_run_of_a_replaced_name(supervisor, workspace):
    first = supervisor.submit("sleepy", {"seconds": 0, "task_name": "rerun"})
    wait_for_run(workspace, first.task_id, first.run_id, 0.05, timeout=30)
    second = supervisor.submit("sleepy", {"seconds": 30, "task_name": "rerun"})
    wait_state(workspace, second.task_id, "running")

    assert supervisor.cancel(second.task_id)
    status = wait_for_run(workspace, second.task_id, second.run_id, 0.05, timeout=30)
    assert status.state == "cancelled" and status.run_id == second.run_id
