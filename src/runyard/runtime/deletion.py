"""Deleting tasks: only finished, metadata-only or broken folders; never an active one.

A deleted task's logs go with it: the folder ``<log_dir>/<task_type>/<task_id>/`` that
holds one log a run, a path the server derives from the validated task id. No path is
taken from a status (a sandboxed task can rewrite its own), so nothing outside that folder
is ever removed; a log that a status of another tool names elsewhere is left alone.
"""

from __future__ import annotations

import os

from runyard.errors import InvalidInput
from runyard.runtime.creation import claim, remove_task_dir
from runyard.runtime.liveness import settle, worker_alive
from runyard.workspace.history import remove_history, remove_task_logs
from runyard.workspace.identity import parse_task_id
from runyard.workspace.layout import Workspace


def delete_tasks(workspace: Workspace, task_ids: list[str]) -> list[str]:
    """Delete what may be deleted; the ids really deleted (invalid, missing, active skipped)."""
    deleted = [task_id for task_id in dict.fromkeys(task_ids) if _delete_one(workspace, task_id)]
    for task_id in deleted:
        remove_task_logs(workspace, task_id)
    return deleted


def _delete_one(workspace: Workspace, task_id: str) -> bool:
    """Delete one folder (and its kept runs); whether it was deleted."""
    try:
        parse_task_id(task_id)
    except InvalidInput:
        return False
    with claim(workspace, task_id):
        if not os.path.lexists(workspace.task_dir(task_id)):
            return False
        status = workspace.read_status(task_id)
        if status is not None:
            status = settle(workspace, status)
            if not status.terminal:
                return False
        elif worker_alive(workspace, task_id):
            return False
        if not remove_task_dir(workspace, task_id):
            return False
        remove_history(workspace, task_id)  # its earlier runs go with the task
    return True
