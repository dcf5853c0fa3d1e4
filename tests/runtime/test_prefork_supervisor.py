"""The supervisor with the pre-forked launcher: same records, same rules."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from runtime_helpers import wait_state, wait_until

from runyard.runtime.liveness import wait_for_run


def finish(ws, handle):
    return wait_for_run(ws, handle.task_id, handle.run_id, poll_interval=0.05, timeout=30)


def test_demo_runs_forked_with_the_same_records(make_supervisor, workspace):
    sup = make_supervisor(prefork=True)
    handle = sup.submit("demo", {"x": 1, "y": 2, "task_name": "forked"})
    status = finish(workspace, handle)

    assert status.state == "succeeded" and status.result == {"result": 3, "artifacts": {}}
    assert "Demo result=3" in Path(status.log_path).read_text()
    assert workspace.read_metadata(handle.task_id).output_params == status.result
    failed = finish(workspace, sup.submit("demo", {"x": 1, "y": 2, "fail": True}))
    assert failed.state == "failed" and failed.error.startswith("RuntimeError: Demo failure")


def test_plugin_task_env_and_argv_when_forked(make_supervisor, workspace, monkeypatch):
    monkeypatch.setenv("RUNYARD_TEST_HIDDEN", "secret")
    sup = make_supervisor(prefork=True)
    status = finish(workspace, sup.submit("envdump", {}))
    assert status.state == "succeeded"
    assert "RUNYARD_TEST_HIDDEN" not in status.result["env"]
    assert status.result["cwd"] == str(workspace.task_dir(status.task_id))

    handle = sup.submit("sleepy", {"marker": "marker-5e6f"})
    running = wait_state(workspace, handle.task_id, "running")
    assert b"marker-5e6f" not in Path(f"/proc/{running.pid}/cmdline").read_bytes()
    assert sup.cancel(handle.task_id)
    assert finish(workspace, handle).state == "cancelled"


def test_kill_9_of_a_forked_worker_reports_the_signal(make_supervisor, workspace):
    sup = make_supervisor(prefork=True)
    handle = sup.submit("sleepy", {"seconds": 30})
    running = wait_state(workspace, handle.task_id, "running")
    wait_until(lambda: "sleeping" in Path(running.log_path).read_text())
    os.kill(running.pid, signal.SIGKILL)

    status = finish(workspace, handle)
    assert status.state == "failed" and status.exit_code == 137
    assert "signal 9" in status.error and "sleeping 30.0" in status.error


def test_forked_workers_outlive_the_supervisor_and_are_adopted(make_supervisor, workspace):
    first = make_supervisor(prefork=True, max_concurrent_tasks=1)
    running = first.submit("sleepy", {"seconds": 30})
    queued = first.submit("demo", {"x": 2, "y": 2})
    wait_state(workspace, running.task_id, "running")
    first.stop()

    second = make_supervisor(prefork=True, max_concurrent_tasks=1)
    assert second.active_count() == 2
    assert second.cancel(running.task_id)
    assert finish(workspace, running).state == "cancelled"
    assert finish(workspace, queued).result["result"] == 4


def test_a_submit_does_not_wait_while_an_exit_waits_for_the_launchers_report(
    make_supervisor, workspace
):
    """A worker's end is known once the launcher has reaped it and said its exit code; a
    submit made meanwhile is not held back by that wait."""
    sup = make_supervisor(prefork=True)
    handle = sup.submit("sleepy", {"seconds": 0.3})
    running = wait_state(workspace, handle.task_id, "running")
    launcher = sup._executor._ensure_zygote()._proc.pid  # the launcher this supervisor started

    def ended() -> bool:
        state = Path(f"/proc/{running.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state == "Z"

    os.kill(launcher, signal.SIGSTOP)  # it can neither reap the worker nor report its code
    try:
        wait_until(ended)
        time.sleep(0.3)  # the supervisor has seen the exit and waits for the report
        started = time.monotonic()
        queued = sup.submit("demo", {"x": 1, "y": 2})
        took = time.monotonic() - started
    finally:
        os.kill(launcher, signal.SIGCONT)
    assert took < 1.0, f"the submit waited {took:.2f} s for another run's exit report"
    assert finish(workspace, handle).state == "succeeded"
    assert finish(workspace, queued).state == "succeeded"
