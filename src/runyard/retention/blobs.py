"""Which stored blobs (``.history/.blobs``) gc removes: those no kept run names any more.

Mark and sweep. The mark is every sha256 that a manifest of a kept run lists
(``.history/<type>/<task_id>/.<run_id>.files.json`` whose entry ``<run_id>/`` is there,
listed as a run or not),
less the runs a plan is about to remove; the sweep removes every other blob. Both run under
the store's lock (:func:`runyard.workspace.blobstore.store_lock`), the one deduplication
takes too, so a blob stored for a manifest not yet written is never swept. Manifests are
read as :func:`runyard.workspace.dedup.read_manifest` reads them (shas validated).

    planned = plan_blobs(workspace, going={("base#demo#x", run_id)})   # a dry run
    removed = sweep_blobs(workspace)                                    # after the entries
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from runyard.workspace.blobstore import remove_blob, store_lock, stored_shas
from runyard.workspace.dedup import read_manifest
from runyard.workspace.history import history_task_ids, task_history_dir
from runyard.workspace.identity import is_run_id
from runyard.workspace.layout import Workspace


@dataclass(frozen=True)
class PlannedBlob:
    sha256: str
    bytes: int


def referenced(workspace: Workspace, going: set[tuple[str, str]]) -> set[str]:
    """The shas the manifests of kept runs name, but for the runs in ``going``."""
    marked: set[str] = set()
    for task_id in history_task_ids(workspace):
        for run_id in _entry_names(task_history_dir(workspace, task_id)):
            if (task_id, run_id) not in going:
                manifest = read_manifest(workspace, task_id, run_id)
                marked.update(item["sha256"] for item in manifest.values())
    return marked


def _entry_names(folder: Path) -> list[str]:
    """Every entry folder named by a run id (listed or not: a blob of any is kept)."""
    try:
        with os.scandir(folder) as entries:
            return [
                e.name for e in entries if is_run_id(e.name) and e.is_dir(follow_symlinks=False)
            ]
    except OSError:
        return []


def plan_blobs(workspace: Workspace, going: set[tuple[str, str]]) -> list[PlannedBlob]:
    """The blobs a collection that removes the runs ``going`` would remove after them."""
    marked = referenced(workspace, going)
    return [PlannedBlob(sha, size) for sha, size in stored_shas(workspace) if sha not in marked]


def sweep_blobs(workspace: Workspace) -> list[PlannedBlob]:
    """Remove the blobs no kept run names; those removed."""
    removed = []
    with store_lock(workspace):
        for blob in plan_blobs(workspace, set()):
            if remove_blob(workspace, blob.sha256):
                removed.append(blob)
    return removed
