"""Finding the runs a supervisor must take care of at start, and who runs them now."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from runyard.runtime.workerlock import lock_held, read_owner
from runyard.workspace.atomic import read_bytes_tolerant
from runyard.workspace.history import history_root
from runyard.workspace.layout import STATUS_FILE, Workspace
from runyard.workspace.records import TaskStatus, status_from_dict

_UNFINISHED = re.compile(rb'"state"\s*:\s*"(?:queued|running)"')


class KnownTasks(Protocol):
    """What a built index already knows, so a supervisor's start reads no folder for it.

    Each answers None while the index is not built: the supervisor reads the files then.
    """

    def unfinished_statuses(self) -> list[TaskStatus] | None:
        """Every ``queued`` or ``running`` status, oldest first."""

    def recordless_ids(self) -> list[str] | None:
        """Task folders with neither a valid status nor valid metadata."""


@dataclass(frozen=True)
class WorkerRef:
    """The live worker process of a run, as its lock file records it."""

    pid: int
    start_time: int | None


def unfinished_statuses(workspace: Workspace) -> list[TaskStatus]:
    """Every ``queued`` or ``running`` status, oldest first (one pass over the folders)."""
    found = []
    for task_id, folder in workspace.iter_task_dirs():
        raw = read_bytes_tolerant(folder / STATUS_FILE)
        if raw is None or not _UNFINISHED.search(raw):
            continue
        try:
            data = json.loads(raw)
        except ValueError:
            continue
        status = status_from_dict(data, task_id) if isinstance(data, dict) else None
        if status is not None and not status.terminal:
            found.append(status)
    found.sort(key=lambda status: (status.created_at, status.task_id))
    return found


def ended_runs(workspace: Workspace, run_ids: Iterable[str]) -> set[str]:
    """Those of ``run_ids`` whose end this workspace records: a task's current run in a
    final state, or a kept earlier run (one pass over the folders, for a few ids)."""
    wanted = {run_id for run_id in run_ids if run_id}
    if not wanted:
        return set()
    found = _kept_run_ids(workspace) & wanted
    needles = [run_id.encode() for run_id in wanted - found]
    for task_id, folder in workspace.iter_task_dirs() if needles else ():
        raw = read_bytes_tolerant(folder / STATUS_FILE)
        if raw is None or not any(needle in raw for needle in needles):
            continue
        try:
            data = json.loads(raw)
        except ValueError:
            continue
        status = status_from_dict(data, task_id) if isinstance(data, dict) else None
        if status is not None and status.terminal and status.run_id in wanted:
            found.add(status.run_id)
    return found


def _kept_run_ids(workspace: Workspace) -> set[str]:
    """The run ids of every kept earlier run (``.history/<type>/<task id>/<run id>/``)."""
    found: set[str] = set()
    for folder in _subfolders(history_root(workspace), depth=2):
        found.update(entry.name for entry in _scandir(folder) if _is_folder(entry))
    return found


def _subfolders(root: str | os.PathLike[str], depth: int) -> list[str]:
    level = [os.fspath(root)]
    for _ in range(depth):
        level = [entry.path for path in level for entry in _scandir(path) if _is_folder(entry)]
    return level


def _scandir(path: str | os.PathLike[str]) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as entries:
            return list(entries)
    except OSError:
        return []


def _is_folder(entry: os.DirEntry[str]) -> bool:
    return not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False)


def live_worker(workspace: Workspace, status: TaskStatus) -> WorkerRef | None:
    """The process holding the task's worker lock, or None when no worker is alive.

    Falls back to the status ``pid`` (unchecked start time) when the lock file's record
    cannot be read.
    """
    lock = workspace.lock_path(status.task_id)
    if not lock_held(lock):
        return None
    owner = read_owner(lock)
    if owner is not None:
        return WorkerRef(owner.pid, owner.start_time)
    if status.pid:
        return WorkerRef(status.pid, None)
    return None
