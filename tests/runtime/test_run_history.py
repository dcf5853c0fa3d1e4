"""Run history: a fixed-name rerun keeps the replaced run's whole folder under
``.history``, whole or not at all (a crash at either side of the rename loses nothing and
leaves no half entry), never following a symlink or hard link the task planted in its own
folder; deleting the task removes its history."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from runtime_helpers import wait_state

from runyard.runtime.creation import create_task
from runyard.workspace.dedup import dedup_entry
from runyard.workspace.history import kept_runs, run_ids, task_history_dir
from runyard.workspace.layout import EVENTS_FILE, METADATA_FILE, STATUS_FILE
from runyard.workspace.records import TaskState
from runyard.workspace.runfiles import list_run_files


def run_to_end(sup, workspace, name: str, **inputs):
    handle = sup.submit("demo", {"x": 1, "y": 2, "task_name": name, **inputs})
    return wait_state(workspace, handle.task_id, "succeeded" if not inputs else "failed")


def test_reruns_keep_each_replaced_run_whole(supervisor, workspace):
    first = run_to_end(supervisor, workspace, "hist")
    first_records = {
        name: (workspace.task_dir(first.task_id) / name).read_bytes()
        for name in (STATUS_FILE, METADATA_FILE, EVENTS_FILE)
    }
    second = run_to_end(supervisor, workspace, "hist", fail=True)
    third = run_to_end(supervisor, workspace, "hist")

    history = task_history_dir(workspace, first.task_id)
    assert history == workspace.root / ".history" / "base" / "base#demo#hist"
    entries = [name for name in os.listdir(history) if not name.startswith(".")]
    assert sorted(entries) == sorted([first.run_id, second.run_id])
    kept = history / first.run_id
    assert {name: (kept / name).read_bytes() for name in first_records} == first_records
    assert json.loads((history / second.run_id / STATUS_FILE).read_bytes())["state"] == "failed"
    assert [s.run_id for s in kept_runs(workspace, first.task_id)] == [
        second.run_id, first.run_id,
    ]  # fmt: skip
    # the seed's folder holds the current run only, as before
    assert workspace.read_status(first.task_id).run_id == third.run_id


def test_planted_symlink_and_hard_link_are_not_followed(workspace, registry, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "evil"})
    workspace.write_status(status.model_copy(update={"state": TaskState.SUCCEEDED}))
    folder = workspace.task_dir(status.task_id)
    (folder / EVENTS_FILE).unlink()
    (folder / EVENTS_FILE).symlink_to(secret)
    os.link(secret, folder / METADATA_FILE)

    create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "evil"})
    dedup_entry(workspace, status.task_id, status.run_id)

    kept = task_history_dir(workspace, status.task_id) / status.run_id
    assert (kept / EVENTS_FILE).is_symlink()  # moved as it was, never followed
    assert secret.read_text() == "host secret\n" and secret.stat().st_nlink == 2
    served = list_run_files(workspace, status.task_id, status.run_id)
    assert [item["path"] for item in served] == [STATUS_FILE]
    for path in (workspace.root / ".history").rglob("*"):
        if path.is_file() and not path.is_symlink() and path.stat().st_nlink == 1:
            assert b"host secret" not in path.read_bytes()


def test_a_planted_run_id_cannot_leave_the_history_folder(workspace, registry):
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "esc"})
    workspace.write_status(
        status.model_copy(update={"state": TaskState.SUCCEEDED, "run_id": "../../../escaped"})
    )
    create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "esc"})
    assert not list(workspace.root.rglob("escaped"))
    assert not task_history_dir(workspace, status.task_id).exists()


def test_delete_removes_the_task_history(make_supervisor, workspace, registry):
    sup = make_supervisor(start=False)
    for _ in range(2):
        status = create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "gone"})
        workspace.write_status(status.model_copy(update={"state": TaskState.SUCCEEDED}))
    history = task_history_dir(workspace, status.task_id)
    assert len(os.listdir(history)) == 1
    assert sup.delete([status.task_id]) == [status.task_id]
    assert not history.exists()


CRASH = """
import sys
from pathlib import Path
from runyard.runtime.creation import create_task
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace
ws = Workspace.open(Path(sys.argv[1]), Path(sys.argv[2]))
create_task(ws, TaskRegistry.load(plugins=False), "demo", {"x": 1, "y": 2, "task_name": "crash"})
"""


def rerun(workspace, fault: str | None) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    if fault:
        env["RUNYARD_FAULT_POINT"] = fault
    argv = [sys.executable, "-c", CRASH, str(workspace.root), str(workspace.log_dir)]
    return subprocess.run(argv, env=env, timeout=60).returncode


def test_a_crash_while_keeping_history_loses_nothing(workspace, registry):
    old = create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "crash"})
    workspace.write_status(old.model_copy(update={"state": TaskState.SUCCEEDED}))
    (workspace.task_dir(old.task_id) / "model.bin").write_bytes(b"weights" * 1000)
    old_status = workspace.status_path(old.task_id).read_bytes()
    history = task_history_dir(workspace, old.task_id)

    assert rerun(workspace, "history.staged") == -9
    # killed just before the rename: the old run is still the task, no entry is listed
    assert workspace.status_path(old.task_id).read_bytes() == old_status
    assert kept_runs(workspace, old.task_id) == []
    assert list(history.iterdir()) == []

    assert rerun(workspace, "history.kept") == -9
    # renamed, the new run not yet made: the entry is the whole old folder
    assert not workspace.task_dir(old.task_id).exists()
    assert (history / old.run_id / STATUS_FILE).read_bytes() == old_status
    assert (history / old.run_id / "model.bin").read_bytes() == b"weights" * 1000
    assert run_ids(workspace, old.task_id) == [old.run_id]

    assert rerun(workspace, None) == 0
    assert [s.run_id for s in kept_runs(workspace, old.task_id)] == [old.run_id]
    assert (history / old.run_id / STATUS_FILE).read_bytes() == old_status
    current = workspace.read_status(old.task_id)
    assert current.run_id != old.run_id and current.state == TaskState.QUEUED
