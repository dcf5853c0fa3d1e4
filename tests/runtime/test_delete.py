"""Deleting tasks: finished and broken folders go, active ones stay, shared logs stay."""

from __future__ import annotations

import json
from pathlib import Path

from runtime_helpers import wait_state

from runyard.runtime.creation import create_task
from runyard.runtime.launch import run_task
from runyard.runtime.liveness import wait_for_run
from runyard.workspace.records import TaskState


def finished(workspace, registry, name: str, state: TaskState = TaskState.SUCCEEDED):
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": name})
    status = status.model_copy(update={"state": state})
    workspace.write_status(status)
    Path(status.log_path).parent.mkdir(parents=True, exist_ok=True)
    Path(status.log_path).write_text(f"log of {name}\n")
    return status


def test_finished_tasks_are_deleted_with_their_logs(make_supervisor, workspace, registry):
    changes: list[str] = []
    sup = make_supervisor(start=False)
    sup._on_change = changes.append
    done = finished(workspace, registry, "done")
    failed = finished(workspace, registry, "bad", TaskState.FAILED)

    deleted = sup.delete([done.task_id, failed.task_id, done.task_id])

    assert deleted == [done.task_id, failed.task_id] and changes == deleted
    assert not workspace.task_dir(done.task_id).exists()
    assert not Path(done.log_path).exists() and not Path(done.log_path).parent.exists()
    assert not Path(failed.log_path).exists()


def test_active_invalid_and_missing_ids_are_skipped(
    make_supervisor, workspace, registry, settings
):
    sup = make_supervisor(start=False)
    queued = create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "waiting"})
    handle = run_task(settings, workspace, registry, "sleepy", {"seconds": 30, "task_name": "live"})
    wait_state(workspace, handle.task_id, "running")

    assert sup.delete([queued.task_id, handle.task_id, "no id", "base#demo#missing"]) == []
    assert workspace.read_status(queued.task_id).state == "queued"
    assert workspace.read_status(handle.task_id).state == "running"

    assert sup.cancel(handle.task_id)
    wait_for_run(workspace, handle.task_id, handle.run_id, 0.05, timeout=30)
    assert sup.delete([handle.task_id]) == [handle.task_id]


def test_broken_record_less_and_metadata_only_folders_are_deletable(make_supervisor, workspace):
    sup = make_supervisor(start=False)
    base = workspace.type_dir("base")
    (base / "base#demo#empty").mkdir()
    (base / "base#demo#corrupt").mkdir()
    (base / "base#demo#corrupt" / "status.json").write_text("{half")
    (base / "base#demo#meta").mkdir()
    (base / "base#demo#meta" / "metadata.json").write_text(json.dumps(
        {"task_id": "base#demo#meta", "reg_name": "demo", "created_at": "2020-01-01T00:00:00Z",
         "task_type": "base"}))
    ids = ["base#demo#empty", "base#demo#corrupt", "base#demo#meta"]

    assert sup.delete(ids) == ids
    assert list(base.iterdir()) == []


def test_log_is_kept_while_another_status_refers_to_it(make_supervisor, workspace, registry):
    sup = make_supervisor(start=False)
    first = finished(workspace, registry, "first")
    second = finished(workspace, registry, "second")
    shared = second.model_copy(update={"log_path": first.log_path})
    workspace.write_status(shared)

    assert sup.delete([first.task_id]) == [first.task_id]
    assert Path(first.log_path).read_text() == "log of first\n"

    assert sup.delete([second.task_id]) == [second.task_id]
    assert not Path(first.log_path).exists()
    assert Path(second.log_path).exists()  # nothing named it any more, but it is not "its" log


def test_a_log_outside_the_log_folder_is_never_removed(make_supervisor, workspace, registry,
                                                       tmp_path):
    sup = make_supervisor(start=False)
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    status = finished(workspace, registry, "outside")
    workspace.write_status(status.model_copy(update={"log_path": str(outside)}))

    assert sup.delete([status.task_id]) == [status.task_id]
    assert outside.read_text() == "keep me"


def test_a_deleted_name_can_be_reused(make_supervisor, workspace, registry):
    sup = make_supervisor(start=False)
    old = finished(workspace, registry, "reuse")
    sup.delete([old.task_id])
    new = create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "reuse"})
    assert new.task_id == old.task_id and new.run_id != old.run_id
