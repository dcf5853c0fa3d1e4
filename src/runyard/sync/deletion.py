"""Propagating deletions (``runyard sync push --delete``): only tasks a source sent, only
when they are gone at that source, never an active one.

The receiver knows which of its tasks came from a source by their ``synced_from.server``.
The sender asks for that list (:func:`held_from`), keeps the ids its filter covers and
that no longer exist locally (:func:`gone_here`), and asks the receiver to delete them
(:func:`delete_synced`), which checks each again: a task that is not from that source,
or is active, is refused, never deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runyard.sync.candidates import TaskFilter
from runyard.workspace.identity import parse_task_id
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskStatus

MAX_DELETES = 1000  # ids in one request; the sender sends more in several


def source_of(status: TaskStatus) -> str | None:
    origin = (status.model_extra or {}).get("synced_from")
    if isinstance(origin, dict) and isinstance(origin.get("server"), str):
        return str(origin["server"])
    return None


def held_from(workspace: Workspace, source: str) -> list[str]:
    """The ids of this workspace's tasks that ``source`` sent (receiver side)."""
    held = []
    for task_id, _ in workspace.iter_task_dirs():
        status = workspace.read_status(task_id)
        if status is not None and source_of(status) == source:
            held.append(task_id)
    return sorted(held)


def covered(task_filter: TaskFilter, task_id: str) -> bool:
    """Whether a task that exists only on the receiver falls under the push's filter
    (``--since`` speaks of finish times, which a deleted task no longer has: not used)."""
    if task_filter.task_ids and task_id not in task_filter.task_ids:
        return False
    task_type, task, _ = parse_task_id(task_id)
    if task_filter.task_type and task_type != task_filter.task_type:
        return False
    return not (task_filter.task and task != task_filter.task)


def gone_here(workspace: Workspace, held: list[str], task_filter: TaskFilter) -> list[str]:
    """Of ``held`` (sent earlier by this source), those the filter covers and that this
    workspace no longer has (sender side)."""
    return [
        task_id
        for task_id in held
        if covered(task_filter, task_id) and not workspace.task_dir(task_id).exists()
    ]


def delete_synced(
    workspace: Workspace, source: str, task_ids: list[str], delete: Callable[[list[str]], Any]
) -> dict[str, Any]:
    """Delete each task that ``source`` sent and that is finished here (receiver side);
    ``delete`` is the workspace owner's delete (the supervisor's)."""
    deleted: list[str] = []
    refused: dict[str, str] = {}
    for task_id in task_ids:
        status = workspace.read_status(task_id)
        if status is None:
            continue  # already gone: nothing to do, nothing to say
        if source_of(status) != source:
            refused[task_id] = "not synced from this source: left alone"
        elif not status.terminal:
            refused[task_id] = "active here: left alone"
        elif task_id in delete([task_id]):
            deleted.append(task_id)
        else:
            refused[task_id] = "could not be deleted here"
    return {"deleted": deleted, "refused": refused}
