"""Deleting tasks: only finished, metadata-only or broken folders; never an active one.

A task's log is removed with it only when it lies inside the log folder and no other
status refers to it (a shared or foreign log is kept). A server answers that from its
index's count of log references (``references``); without one, every status is read once
per call, so delete in batches rather than one id at a time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from runyard.errors import InvalidInput
from runyard.runtime.creation import claim, remove_task_dir
from runyard.runtime.liveness import settle, worker_alive
from runyard.workspace.atomic import read_bytes_tolerant
from runyard.workspace.history import remove_history
from runyard.workspace.identity import parse_task_id
from runyard.workspace.layout import STATUS_FILE, Workspace
from runyard.workspace.records import status_from_dict

LogReferences = Callable[[list[str], set[str]], set[str] | None]
"""``references(deleted_ids, paths)``: which of ``paths`` a remaining status still names as
its log, or None when it cannot tell (then the statuses are read)."""


def delete_tasks(
    workspace: Workspace, task_ids: list[str], references: LogReferences | None = None
) -> list[str]:
    """Delete what may be deleted; the ids really deleted (invalid, missing, active skipped)."""
    deleted: list[str] = []
    logs: set[str] = set()
    for task_id in dict.fromkeys(task_ids):
        log_path = _delete_one(workspace, task_id)
        if log_path is not None:
            deleted.append(task_id)
            if log_path:
                logs.add(os.path.abspath(log_path))
    _remove_unreferenced_logs(workspace, logs, lambda owned: _still_named(
        workspace, deleted, owned, references))  # fmt: skip
    return deleted


def _still_named(
    workspace: Workspace, deleted: list[str], owned: set[str], references: LogReferences | None
) -> set[str]:
    found = references(deleted, owned) if references is not None else None
    return found if found is not None else _referenced(workspace, owned)


def _delete_one(workspace: Workspace, task_id: str) -> str | None:
    """Delete one folder; its log path ("" if none), or None when it was not deleted."""
    try:
        parse_task_id(task_id)
    except InvalidInput:
        return None
    with claim(workspace, task_id):
        if not os.path.lexists(workspace.task_dir(task_id)):
            return None
        status = workspace.read_status(task_id)
        if status is not None:
            status = settle(workspace, status)
            if not status.terminal:
                return None
        elif worker_alive(workspace, task_id):
            return None
        if not remove_task_dir(workspace, task_id):
            return None
        remove_history(workspace, task_id)  # its earlier runs go with the task
    return status.log_path if status is not None else ""


def _remove_unreferenced_logs(
    workspace: Workspace, logs: set[str], referenced: Callable[[set[str]], set[str]]
) -> None:
    owned = {path for path in logs if _inside(workspace.log_dir, path) and os.path.isfile(path)}
    if not owned:
        return
    for path in owned - referenced(owned):
        try:
            os.unlink(path)
            os.rmdir(os.path.dirname(path))  # only succeeds once no other run's log is left
        except OSError:
            pass


def _inside(folder: Path, path: str) -> bool:
    real_folder = os.path.realpath(folder)
    return os.path.realpath(path).startswith(real_folder + os.sep)


def _referenced(workspace: Workspace, paths: set[str]) -> set[str]:
    """Which of ``paths`` some remaining status names as its ``log_path``."""
    needles = {_needle(path) for path in paths} | {_needle(path, ascii_only=True) for path in paths}
    found: set[str] = set()
    for task_id, folder in workspace.iter_task_dirs():
        raw = read_bytes_tolerant(folder / STATUS_FILE)
        if raw is None or not any(needle in raw for needle in needles):
            continue
        try:
            data = json.loads(raw)
        except ValueError:
            continue
        status = status_from_dict(data, task_id) if isinstance(data, dict) else None
        if status is not None and status.log_path:
            candidate = os.path.abspath(status.log_path)
            if candidate in paths:
                found.add(candidate)
    return found


def _needle(path: str, ascii_only: bool = False) -> bytes:
    """The file name as it appears inside a JSON string."""
    return json.dumps(os.path.basename(path), ensure_ascii=ascii_only)[1:-1].encode()
