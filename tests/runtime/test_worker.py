"""The worker process: records, publish order, failures, environment, inputs off argv."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from runtime_helpers import RenameRecorder, wait_state

from runyard.config import Settings
from runyard.executors.local import LocalExecutor
from runyard.runtime.creation import create_task
from runyard.runtime.launch import run_task, worker_spec
from runyard.runtime.liveness import wait_for_run
from runyard.runtime.worker import EXIT_REFUSED, WorkerPayload
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.events import read_events
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskState, TaskStatus


def run_to_end(
    settings: Settings, ws: Workspace, registry: TaskRegistry, task: str, inputs: dict
) -> TaskStatus:
    handle = run_task(settings, ws, registry, task, inputs)
    return wait_for_run(ws, handle.task_id, handle.run_id, poll_interval=0.05, timeout=30)


def events_of(ws: Workspace, task_id: str) -> list[dict]:
    return [event for _, event in read_events(ws.events_path(task_id))[0]]


def test_demo_success_writes_every_record(settings, workspace, registry):
    status = run_to_end(settings, workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "d1"})

    assert status.state == "succeeded" and status.exit_code == 0 and status.error == ""
    assert status.task_id == "base#demo#d1" and status.task_name == "demo"
    assert status.config == {"task_name": "d1", "source_tasks": "", "x": 1, "y": 2, "fail": False}
    assert status.result == {"result": 3, "artifacts": {}}
    assert [s.name for s in status.steps] == ["prepare", "compute"]
    assert all(s.percentage == 100 and s.finished_at for s in status.steps)
    assert status.started_at and status.finished_at and status.created_at.endswith("Z")
    assert status.log_path == str(workspace.run_log_path(status.task_id, status.run_id))
    assert "Demo result=3" in Path(status.log_path).read_text()

    meta = workspace.read_metadata(status.task_id)
    assert meta is not None and meta.reg_name == "demo" and meta.task_type == "base"
    assert meta.input_params == status.config and meta.output_params == status.result
    assert "run_id" not in json.loads(workspace.metadata_path(status.task_id).read_text())

    events = events_of(workspace, status.task_id)
    states = [e["state"] for e in events if e["kind"] == "state"]
    assert states == ["queued", "running", "succeeded"]
    progress = [(e["name"], e["percentage"]) for e in events if e["kind"] == "progress"]
    assert progress == [("prepare", 0), ("prepare", 100), ("compute", 0), ("compute", 100)]


def test_metadata_is_published_before_the_succeeded_status(settings, workspace, registry):
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
    recorder = RenameRecorder(workspace.task_dir(status.task_id))
    try:
        target = registry.get("demo").target
        LocalExecutor().launch(worker_spec(settings, workspace, status, target))
        final = wait_for_run(workspace, status.task_id, status.run_id, 0.05, timeout=30)
        names = [name for name in recorder.read() if not name.startswith(".")]
    finally:
        recorder.close()
    assert final.state == "succeeded"
    assert names.count("metadata.json") == 1
    assert names.index("metadata.json") < len(names) - 1 and names[-1] == "status.json"


def test_demo_fail_records_error_and_traceback(settings, workspace, registry):
    status = run_to_end(settings, workspace, registry, "demo", {"x": 1, "y": 2, "fail": True})

    assert status.state == "failed" and status.exit_code == 1
    assert status.error == "RuntimeError: Demo failure requested (fail=true)"
    assert status.result == {}
    log = Path(status.log_path).read_text()
    assert "Traceback (most recent call last)" in log and "Demo inputs x=1 y=2" in log
    assert workspace.read_metadata(status.task_id) is None
    assert events_of(workspace, status.task_id)[-1]["state"] == "failed"


def test_command_exit_code_and_output(settings, workspace, registry):
    inputs = {"command": "sh -c 'echo out-line; echo err-line >&2; exit 3'"}
    status = run_to_end(settings, workspace, registry, "command", inputs)

    assert status.state == "failed" and status.exit_code == 3
    # the error carries the command's last lines (tasks/builtin/outputtail.py)
    tail = "its last output:\nout-line\nerr-line"
    assert status.error == f"TaskExit: Command exited with code 3; {tail}"
    log = Path(status.log_path).read_text()
    assert "out-line" in log and "err-line" in log


def test_command_artifacts_have_size_and_sha256(settings, workspace, registry):
    inputs = {"command": "sh -c 'mkdir sub && printf hello > sub/a.txt && echo done'",
              "task_name": "c1"}
    status = run_to_end(settings, workspace, registry, "command", inputs)

    assert status.state == "succeeded", status.error
    record = status.result["artifacts"]["sub/a.txt"]
    assert record == {"path": "sub/a.txt", "size": 5,
                      "sha256": hashlib.sha256(b"hello").hexdigest()}
    assert workspace.read_metadata(status.task_id).output_params == status.result
    assert "done" in Path(status.log_path).read_text()


def test_task_recorded_artifact_and_custom_exit_code(settings, workspace, registry):
    status = run_to_end(settings, workspace, registry, "writefile", {})
    blob = status.result["artifacts"]["blob"]
    assert blob["size"] == 10000 and blob["path"] == "data/out.bin"
    assert blob["sha256"] == hashlib.sha256(b"\x00\x01" * 5000).hexdigest()

    failed = run_to_end(settings, workspace, registry, "exitwith", {"code": 9})
    assert failed.state == "failed" and failed.exit_code == 9
    assert failed.error == "TaskExit: leaving with 9"


def test_progress_never_goes_backwards_and_is_clamped(settings, workspace, registry):
    status = run_to_end(settings, workspace, registry, "progress", {})

    steps = {step.name: step.percentage for step in status.steps}
    assert steps == {"work": 100.0, "extra": 30.0}
    seen = [e["percentage"] for e in events_of(workspace, status.task_id)
            if e["kind"] == "progress" and e["name"] == "work"]
    assert seen == [50, 70, 100]


def test_strict_worker_env_is_the_allow_list_plus_worker_env(tmp_path, registry, monkeypatch):
    from runtime_helpers import make_settings

    monkeypatch.setenv("RUNYARD_TEST_HIDDEN", "secret")
    monkeypatch.setenv("RUNYARD_TEST_SHOWN", "visible")
    settings = make_settings(
        tmp_path, task_env="strict", env_allowlist=["PATH", "RUNYARD_TEST_SHOWN"]
    )
    settings.worker_env["EXTRA_VAR"] = "extra"
    ws = Workspace.open(settings.workspace_dir, settings.log_dir)

    status = run_to_end(settings, ws, registry, "envdump", {})

    env = status.result["env"]
    assert "RUNYARD_TEST_HIDDEN" not in env and "HOME" not in env
    assert env["RUNYARD_TEST_SHOWN"] == "visible" and env["EXTRA_VAR"] == "extra"
    assert env["RUNYARD_TASK_ID"] == status.task_id
    assert status.result["cwd"] == str(ws.task_dir(status.task_id))


def test_inputs_never_reach_argv(settings, workspace, registry):
    marker = "marker-d41d8cd98f00b204"
    handle = run_task(settings, workspace, registry, "sleepy", {"marker": marker})
    status = wait_state(workspace, handle.task_id, "running")

    cmdline = Path(f"/proc/{status.pid}/cmdline").read_bytes()
    # the process title names the task (type and id), never its inputs
    assert cmdline.split(b"\0")[0] == f"runyard task {status.task_type} {status.task_id}".encode()
    assert marker.encode() not in cmdline


def test_each_run_has_its_own_log(settings, workspace, registry):
    first = run_to_end(settings, workspace, registry, "demo", {"x": 1, "y": 1, "task_name": "again"})
    first_log = Path(first.log_path).read_bytes()
    second = run_to_end(settings, workspace, registry, "demo", {"x": 2, "y": 2, "task_name": "again"})

    assert second.log_path != first.log_path
    assert Path(first.log_path).read_bytes() == first_log
    assert "Demo result=4" in Path(second.log_path).read_text()


@pytest.mark.parametrize("mismatch", ["run_id", "state"])
def test_worker_refuses_a_run_that_is_not_queued_for_it(settings, workspace, registry, mismatch):
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
    run_id = status.run_id
    if mismatch == "run_id":
        run_id = "0" * 32
    else:
        workspace.write_status(status.model_copy(update={"state": TaskState.CANCELLED}))
    payload = WorkerPayload(str(workspace.root), str(workspace.log_dir), status.task_id,
                            run_id, registry.get("demo").target)
    env = {"PATH": os.environ.get("PATH", ""), **settings.worker_env}
    proc = subprocess.run([sys.executable, "-m", "runyard.runtime.worker"], input=payload.dump(),
                          capture_output=True, env=env, timeout=30)

    assert proc.returncode == EXIT_REFUSED
    assert b"not starting" in proc.stderr
    after = workspace.read_status(status.task_id)
    assert after.started_at is None and after.state == ("queued" if mismatch == "run_id"
                                                         else "cancelled")


def test_a_target_that_no_longer_imports_fails_the_run(settings, workspace, registry):
    from dataclasses import replace

    registry.tasks["ghost"] = replace(registry.get("demo"), name="ghost",
                                      target="no_such_module_here:Demo")
    status = run_to_end(settings, workspace, registry, "ghost", {"x": 1, "y": 2})

    assert status.state == "failed" and status.exit_code == 1
    assert status.error == "ModuleNotFoundError: No module named 'no_such_module_here'"
    assert "Traceback" in Path(status.log_path).read_text()


def test_a_command_killed_by_a_signal_fails_with_128_plus_the_signal(settings, workspace, registry):
    status = run_to_end(settings, workspace, registry, "command", {"command": "sh -c 'kill -9 $$'"})
    assert status.state == "failed" and status.exit_code == 137
    assert status.error == "TaskExit: Command killed by signal 9"
