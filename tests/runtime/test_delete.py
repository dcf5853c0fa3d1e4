"""Deleting tasks: finished and broken folders go with their own logs, active ones stay."""

from __future__ import annotations

import json
import os
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


def test_a_forged_log_path_removes_only_the_tasks_own_logs(make_supervisor, workspace, registry):
    """A task can rewrite its status: naming another task's log (through a ``//`` alias the
    string compare of old did not see), the server's own log or a relative path to it makes
    none of them go; its own log folder, derived from its id, goes whatever it says."""
    sup = make_supervisor(start=False)
    other = finished(workspace, registry, "other")
    server_log = workspace.log_dir / "server.log"
    server_log.write_text("server\n")
    alias = str(workspace.log_dir) + "//" + os.path.relpath(other.log_path, workspace.log_dir)
    forged = {"alias": alias, "server": str(server_log), "relative": os.path.relpath(server_log)}
    victims = []
    for name, log_path in forged.items():
        status = finished(workspace, registry, name)
        workspace.write_status(status.model_copy(update={"log_path": log_path}))
        victims.append(status)

    assert sup.delete([v.task_id for v in victims]) == [v.task_id for v in victims]
    assert Path(other.log_path).read_text() == "log of other\n"
    assert server_log.read_text() == "server\n"
    for status in victims:
        assert not Path(status.log_path).parent.exists()


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
