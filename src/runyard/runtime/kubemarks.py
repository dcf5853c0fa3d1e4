"""Which task runs run as Kubernetes Jobs, kept beside the workspace's type folders.

    <workspace>/.kubernetes/<task_type>/<task_id>.json
        {"task_id": ..., "run_id": ..., "handle": {"id": ..., "labels": ..., "data": ...}}

A run is marked before its Job is created (``handle`` null until the create answered), so
a server that restarts finds it again by its labels, never by a PID: a worker in a pod has
no process on this host, and its ``.worker.lock`` is held by another node's kernel. Readers
without a server (the CLI) leave a marked run to the server that follows its Job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runyard.workspace.atomic import read_json_tolerant, write_json_atomic
from runyard.workspace.identity import parse_task_id
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskStatus

MARKS_DIR = ".kubernetes"


def mark_path(workspace: Workspace, task_id: str) -> Path:
    tid = parse_task_id(task_id)
    return workspace.root / MARKS_DIR / tid.task_type / f"{tid}.json"


def mark(
    workspace: Workspace, task_id: str, run_id: str, handle: dict[str, Any] | None = None
) -> None:
    """Record that run ``run_id`` of ``task_id`` runs on Kubernetes (with its Job's handle)."""
    path = mark_path(workspace, task_id)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    record = {"task_id": task_id, "run_id": run_id, "handle": handle}
    write_json_atomic(path, record, sync_dir=handle is None)


def read_mark(workspace: Workspace, task_id: str, run_id: str) -> dict[str, Any] | None:
    """The mark of run ``run_id`` of ``task_id``, or None (another run's mark counts not)."""
    try:
        data = read_json_tolerant(mark_path(workspace, task_id))
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("task_id") != task_id:
        return None
    if data.get("run_id") != run_id:
        return None
    return data


def on_kubernetes(workspace: Workspace, status: TaskStatus) -> bool:
    """Whether the current run of ``status`` runs (or is to run) as a Kubernetes Job."""
    return read_mark(workspace, status.task_id, status.run_id) is not None


def forget_mark(workspace: Workspace, task_id: str) -> None:
    try:
        mark_path(workspace, task_id).unlink(missing_ok=True)
    except ValueError:
        return
