"""The files of one run, current or kept: listed and opened race-free.

A run's files are the plain files of its folder (:func:`runyard.workspace.history.run_dir`)
and, for a kept run, the files its manifest lists in the blob store
(:mod:`runyard.workspace.dedup`). A plain file wins over a stored one of the same path (the
two hold the same bytes while a deduplication is half done). Plain files are opened as a
task's files are (:func:`open_under`: no symlink, no hard link, no hidden name, regular
files only); stored ones by their validated sha256 alone, never by a path from a file.

    items = list_run_files(workspace, task_id, run_id)   # [{"path", "size", "sha256"}]
    opened = open_run_file(workspace, task_id, run_id, "model/weights.bin")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runyard.errors import NoSuchFile, UnsafePath
from runyard.workspace.blobstore import hash_fd, open_blob
from runyard.workspace.dedup import MAX_FILES, read_manifest
from runyard.workspace.filenames import shown_name
from runyard.workspace.history import run_dir
from runyard.workspace.layout import Workspace
from runyard.workspace.safefs import OpenedFile, open_under, split_relative, walk_files

HASHED_UP_TO = 64 * 1024 * 1024  # a plain file larger than this is listed without its sha256
HASH_BUDGET = 256 * 1024 * 1024  # bytes of plain files one listing hashes, at most


def list_run_files(workspace: Workspace, task_id: str, run_id: str) -> list[dict[str, Any]]:
    """``[{"path", "size", "sha256"}]`` sorted by path; NoSuchFile when there is no such run.

    ``sha256`` is the stored content's for a deduplicated file, hashed now for a plain one
    up to :data:`HASHED_UP_TO` bytes (and :data:`HASH_BUDGET` bytes in all), else null.
    Paths are shown names (:mod:`runyard.workspace.filenames`), which :func:`open_run_file`
    takes.
    """
    folder = _folder(workspace, task_id, run_id)
    found: dict[str, dict[str, Any]] = {}
    for entry in walk_files(folder, single_link=True, limit=MAX_FILES):
        found[entry.relative] = {"size": entry.info.st_size, "sha256": None}
    if folder != workspace.task_dir(task_id):
        for path, item in read_manifest(workspace, task_id, run_id).items():
            found.setdefault(path, {"size": item["size"], "sha256": item["sha256"]})
    items = []
    budget = HASH_BUDGET
    for path in sorted(found)[:MAX_FILES]:
        item = found[path]
        if item["sha256"] is None and item["size"] <= min(HASHED_UP_TO, budget):
            item["sha256"] = _plain_sha(folder, path)
            budget -= item["size"]
        items.append({"path": shown_name(path), **item})
    return items


def _plain_sha(folder: Path, relative: str) -> str | None:
    try:
        with open_under(folder, relative, single_link=True) as opened:
            return hash_fd(opened.fd)[0]
    except (NoSuchFile, UnsafePath, OSError):
        return None


def open_run_file(workspace: Workspace, task_id: str, run_id: str, relative: str) -> OpenedFile:
    """The file ``relative`` of run ``run_id``, opened for reading (the caller closes it).

    UnsafePath for a refused name or a link in the way; NoSuchFile when the run or the
    file is not there. ``relative`` is a name as the folder holds it (not a shown name).
    """
    split_relative(relative)  # refuses '..', absolute and hidden names before any lookup
    folder = _folder(workspace, task_id, run_id)
    try:
        return open_under(folder, relative, single_link=True)
    except NoSuchFile:
        if folder == workspace.task_dir(task_id):
            raise
    item = read_manifest(workspace, task_id, run_id).get(relative)
    if item is None:
        raise NoSuchFile(relative, f"is not a file of run {run_id}")
    opened = open_blob(workspace, item["sha256"], relative)
    if opened.size != item["size"]:
        opened.close()
        raise NoSuchFile(relative, "is not stored whole")
    return opened


def _folder(workspace: Workspace, task_id: str, run_id: str) -> Path:
    folder = run_dir(workspace, task_id, run_id)
    if folder is None:
        raise NoSuchFile(run_id, f"is not a run of {task_id}")
    return folder
