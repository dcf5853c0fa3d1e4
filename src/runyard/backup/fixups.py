"""Making restored records true in their new home.

- Every task's ``status.log_path`` under the old log folder is told anew: the log of its run
  in the new log folder, derived from the task and run ids.
- A task that was running when the backup was taken has no worker any more: it becomes
  ``failed`` with the error :data:`INTERRUPTED` and the exit code of any dead worker,
  through the same path a server uses for a worker that died (``end_dead_run``).
- The server's submitter records keep who submitted a task but lose the host process
  they named: that process belongs to the machine the backup came from, and a server on
  the restored workspace must never signal or adopt it.
- Agent runs that were queued or running become ``failed`` the same way (their tokens
  stop working with it), and each session's state folder is moved to the new workspace.
- The workspace's Kubernetes instance id and its marks of task runs on Kubernetes go: a
  restored workspace is another instance, which must never follow, sweep or delete the
  Jobs of the one it was copied from (which may still run).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

from runyard.backup.manifest import Manifest
from runyard.executors.kubernetes.placement import INSTANCE_FILE
from runyard.runtime.kubemarks import MARKS_DIR
from runyard.runtime.liveness import end_dead_run
from runyard.runtime.submitters import SUBMITTERS_DIR
from runyard.workspace.atomic import read_json_tolerant, write_json_atomic
from runyard.workspace.layout import Workspace
from runyard.workspace.records import utcnow

INTERRUPTED = "interrupted: restored from backup"
DEAD_WORKER_EXIT = 1


def adopt_restored(manifest: Manifest, workspace_dir: Path, log_dir: Path) -> None:
    workspace = Workspace.open(workspace_dir, log_dir)
    old_logs = Path(manifest.source["log_dir"])
    for task_id, _ in workspace.iter_task_dirs():
        _move_log_path(workspace, task_id, old_logs)
    for task_id in manifest.running_tasks:
        status = workspace.read_status(task_id)
        if status is not None:
            end_dead_run(workspace, task_id, status.run_id, error=INTERRUPTED)
    _forget_host_processes(workspace_dir / SUBMITTERS_DIR)
    shutil.rmtree(workspace_dir / MARKS_DIR, ignore_errors=True)
    (workspace_dir / INSTANCE_FILE).unlink(missing_ok=True)
    old_agent = Path(manifest.source["workspace_dir"]) / "agent"
    _settle_agent_state(workspace_dir / "agent" / "state.db", old_agent, workspace_dir / "agent")


def _move_log_path(workspace: Workspace, task_id: str, old_logs: Path) -> None:
    status = workspace.read_status(task_id)
    if status is None or not status.log_path:
        return
    if not Path(status.log_path).is_relative_to(old_logs):
        return  # a log another tool wrote elsewhere: told as it was
    # derived from the ids, as the server reads it: a (rewritable) status names no path here
    moved = os.path.abspath(workspace.run_log_path(task_id, status.run_id))
    workspace.write_status(status.model_copy(update={"log_path": moved}), durable=True)


def _forget_host_processes(submitters: Path) -> None:
    if not submitters.is_dir():
        return
    for folder, _, names in os.walk(submitters):
        for name in names:
            path = Path(folder) / name
            record = read_json_tolerant(path)
            if isinstance(record, dict) and ("pid" in record or "start_time" in record):
                record.pop("pid", None)
                record.pop("start_time", None)
                write_json_atomic(path, record)


def _settle_agent_state(db_path: Path, old_root: Path, new_root: Path) -> None:
    if not db_path.is_file():
        return
    from runyard.agents.store.sqlite import SQLiteStore
    from runyard.wire import TaskState

    store = SQLiteStore(db_path)
    try:
        for run in store.active_runs():
            store.finish_run(
                run.id, state=TaskState.FAILED, finished_at=utcnow(),
                exit_code=DEAD_WORKER_EXIT, error=INTERRUPTED, answer=None,
            )  # fmt: skip
    finally:
        store.close()
    _move_state_paths(db_path, old_root, new_root)


def _move_state_paths(db_path: Path, old_root: Path, new_root: Path) -> None:
    """Session state folders are stored by absolute path: point them at the new root."""
    old_prefix = f"{old_root}/"
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            "UPDATE session_state SET path = ? || substr(path, ?) WHERE substr(path, 1, ?) = ?",
            (f"{new_root}/", len(old_prefix) + 1, len(old_prefix), old_prefix),
        )
    conn.close()
