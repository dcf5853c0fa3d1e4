"""Folders a crash left half-made, found and removed before a server serves anything.

Submit builds a task folder under a hidden staging name and renames it into place whole
(:mod:`runyard.runtime.creation`), so after a crash there can be:

- a staging folder (``.staging-*`` in ``<workspace>/.staging``, or in a type folder where
  earlier versions built them) whose submit died before the rename,
- a folder renamed aside for removal (``.removing-*``) whose removal died,
- a task folder with no valid status and no valid metadata (left by an older version or
  by hand) whose worker is gone.

Each is removed under the task's claim lock, so a submit in progress in another process
(``runyard run`` beside a server) is waited for, never broken. Given the folders an index
found without records, the type folders are listed only for the hidden (staging, removal)
names, and no record is read but the candidates' (again, under the lock). A folder holding only a
valid ``metadata.json`` is a legitimate record (a seed workspace's results) and is kept.
Every removal is logged.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from runyard.runtime.creation import STAGING_PREFIX, claim, remove_task_dir
from runyard.runtime.liveness import worker_alive
from runyard.workspace.identity import TASK_TYPES, parse_task_id
from runyard.workspace.layout import Workspace

log = logging.getLogger("runyard.reconcile")
REMOVING_PREFIX = ".removing-"
_TOKEN_LEN = 12  # the random part of a staging or removal name, in hex digits


def reconcile_orphans(workspace: Workspace, recordless: Iterable[str] | None = None) -> list[str]:
    """Remove every half-made folder; the workspace-relative names removed.

    ``recordless``: the task folders an index found with no valid record (the only task
    folders that can be half-made); None reads every folder's records.
    """
    removed: list[str] = []
    staging = workspace.staging_dir  # a link there is never followed (it is refused at submit)
    for name in _listing(staging) if _real_dir(staging) else []:
        path = staging / name
        staged = name.startswith(STAGING_PREFIX) and _real_dir(path)
        if staged and _reconcile_one(workspace, path, name):
            removed.append(workspace.relative(path))
    for task_type in sorted(TASK_TYPES):
        base = workspace.type_dir(task_type)
        names = _listing(base)
        if recordless is not None:  # only the hidden names: the index knows the rest
            names = [name for name in names if name[0] == "."]
        for name in names:
            path = base / name
            if _real_dir(path) and _reconcile_one(workspace, path, name):
                removed.append(workspace.relative(path))
    for task_id in sorted(recordless or ()):
        path = workspace.task_dir(task_id)
        if _real_dir(path) and _remove_if_recordless(workspace, task_id):
            removed.append(workspace.relative(path))
    for rel in removed:
        log.warning("reconcile: removed half-made folder %s", rel)
    return removed


def _listing(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def _real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _reconcile_one(workspace: Workspace, path: Path, name: str) -> bool:
    for prefix in (STAGING_PREFIX, REMOVING_PREFIX):
        if name.startswith(prefix):
            return _remove_hidden(workspace, path, name[len(prefix) + _TOKEN_LEN + 1 :])
    if name.startswith("."):
        return False
    try:
        parse_task_id(name)
    except ValueError:
        return False
    return _remove_if_recordless(workspace, name)


def _remove_hidden(workspace: Workspace, path: Path, task_id: str) -> bool:
    """A staging or removal folder: its creator holds the task's claim while it lives."""
    try:
        parse_task_id(task_id)
    except ValueError:
        shutil.rmtree(path, ignore_errors=True)
        return True
    with claim(workspace, task_id):
        if not path.exists():
            return False
        shutil.rmtree(path, ignore_errors=True)
    return True


def _remove_if_recordless(workspace: Workspace, task_id: str) -> bool:
    if not _recordless(workspace, task_id):
        return False
    with claim(workspace, task_id):
        if not _recordless(workspace, task_id):
            return False
        return remove_task_dir(workspace, task_id)


def _recordless(workspace: Workspace, task_id: str) -> bool:
    """No valid status, no valid metadata, and no live worker."""
    if workspace.read_status(task_id) is not None:
        return False
    if workspace.read_metadata(task_id) is not None:
        return False
    return not worker_alive(workspace, task_id)
