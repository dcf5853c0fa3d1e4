"""Storing a kept run's files once: each entry's files move into the blob store.

After a run's folder became a history entry (:mod:`runyard.workspace.history`), each of
its files other than the records is hashed (again: the task wrote the folder, so any hash
it claims is untrusted), stored in ``.history/.blobs`` (:mod:`runyard.workspace.blobstore`)
when that content is not there yet, listed in the entry's manifest, and only then removed
from the entry. The manifest lives beside the entry, where the task never wrote::

    .history/<type>/<task_id>/.<run_id>.files.json
    {"files": {"model/weights.bin": {"size": 52428800, "sha256": "<hex>"}, ...}}

Order makes it crash-safe and full-disk-safe: blob first, manifest next, the file last; at
every moment each file is readable as a plain file of the entry, a blob the manifest names,
or both. A full disk stops the pass with the rest of the files left plain.

What is left as it is: the records (status, metadata, events, metrics, params: plain files
that readers open in place), hidden names (never served), hard-linked files, symlinks,
FIFOs and anything else that is not a regular file; none of these is followed or read.

It runs in a thread of its own right after the keep (:func:`schedule_dedup`); an entry a
crash or a CLI's exit left plain is done by the next ``gc`` (:func:`dedup_all`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

from runyard.errors import NoSuchFile, UnsafePath
from runyard.workspace.atomic import write_bytes_atomic
from runyard.workspace.blobstore import has_blob, hash_fd, is_sha, store_file, store_lock
from runyard.workspace.identity import is_run_id, is_task_id, parse_task_id
from runyard.workspace.layout import RECORD_FILES, Workspace
from runyard.workspace.safefs import (
    DIR_FLAGS,
    FILE_FLAGS,
    closing_fd,
    open_under,
    split_relative,
    visible_dirs,
)

# records stay plain files of the entry (readers such as run_dir's open them in place)
PLAIN_FILES = RECORD_FILES | {"metrics.jsonl", "params.json"}
MAX_FILES = 10_000  # per entry, as a listing of a task's files
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
EXIT_WAIT_SECONDS = 60.0
log = logging.getLogger(__name__)
# the passes of this process still running: its exit waits for them (bounded)
_PENDING: set[threading.Thread] = set()
_PENDING_LOCK = threading.Lock()


def manifest_name(run_id: str) -> str:
    return f".{run_id}.files.json"


def manifest_path(workspace: Workspace, task_id: str, run_id: str) -> Path:
    tid = parse_task_id(task_id)
    if not is_run_id(run_id):
        raise UnsafePath(run_id, "is not a run id")
    return workspace.root / ".history" / tid.task_type / str(tid) / manifest_name(run_id)


def read_manifest(workspace: Workspace, task_id: str, run_id: str) -> dict[str, dict[str, Any]]:
    """The stored files of a kept run: ``{path: {"size", "sha256"}}``; {} when none.

    Entries that are no safe relative path, no sha256 or no size are left out.
    """
    path = manifest_path(workspace, task_id, run_id)
    try:
        with open_under(path.parent, path.name, hidden=True, single_link=True) as opened:
            if opened.size > MAX_MANIFEST_BYTES:
                return {}
            raw = os.pread(opened.fd, MAX_MANIFEST_BYTES, 0)
        data = json.loads(raw)
    except (NoSuchFile, UnsafePath, OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        return {}
    return {p: v for p, v in list(files.items())[:MAX_FILES] if _valid_item(p, v)}


def _valid_item(path: object, item: object) -> bool:
    if not isinstance(path, str) or not isinstance(item, dict):
        return False
    try:
        split_relative(path)
    except UnsafePath:
        return False
    size = item.get("size")
    ok_size = isinstance(size, int) and not isinstance(size, bool) and size >= 0
    return ok_size and is_sha(item.get("sha256"))


def _write_manifest(
    workspace: Workspace, task_id: str, run_id: str, files: dict[str, dict[str, Any]]
) -> None:
    data = json.dumps({"files": files}, sort_keys=True, separators=(",", ":")).encode()
    path = manifest_path(workspace, task_id, run_id)
    write_bytes_atomic(path, data, sync_dir=True, mode=0o600)


# --- one entry ----------------------------------------------------------------------


def dedup_entry(workspace: Workspace, task_id: str, run_id: str) -> int:
    """Move the files of the kept run ``run_id`` into the blob store; how many moved.

    Safe to call again (and beside a background pass: passes take the store's lock). An
    OSError while storing (a full disk) stops the pass; what was stored is kept.
    """
    entry = manifest_path(workspace, task_id, run_id).parent / run_id
    with store_lock(workspace):
        try:
            entry_fd = os.open(entry, DIR_FLAGS)
        except OSError:
            return 0
        with closing_fd(entry_fd):
            manifest = read_manifest(workspace, task_id, run_id)
            stored = _store_files(workspace, entry_fd, manifest)
            if not stored:
                return 0
            _write_manifest(workspace, task_id, run_id, manifest)
            for relative, info in stored:
                _unlink_same(entry_fd, relative, info)
    return len(stored)


def _store_files(
    workspace: Workspace, entry_fd: int, manifest: dict[str, dict[str, Any]]
) -> list[tuple[str, os.stat_result]]:
    """Store each file of the entry; adds them to ``manifest``; the (path, stat) stored."""
    stored: list[tuple[str, os.stat_result]] = []
    candidates = _candidate_files(entry_fd)
    with contextlib.closing(candidates):
        for relative, fd in candidates:
            try:
                entry = _store_one(workspace, fd)
            except OSError as exc:
                log.warning("Cannot store a kept file (%s); the rest stays as it is", exc)
                break
            finally:
                os.close(fd)
            manifest[relative] = entry[0]
            stored.append((relative, entry[1]))
    return stored


def _store_one(workspace: Workspace, fd: int) -> tuple[dict[str, Any], os.stat_result]:
    """Hash the open file, store it unless its content is stored; its manifest item."""
    info = os.fstat(fd)
    sha, size = hash_fd(fd)
    if not has_blob(workspace, sha):
        sha, size = store_file(workspace, fd)  # named by the copy's own bytes
    return {"size": size, "sha256": sha}, info


def _candidate_files(entry_fd: int) -> Generator[tuple[str, int], None, None]:
    """The entry's regular, singly linked, visible files other than its records, each
    opened (the caller closes it); no symlink is followed and no FIFO is opened blocking."""
    count = 0
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(
        ".", dir_fd=entry_fd, follow_symlinks=False
    ):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        prefix = "" if dirpath == "." else dirpath[2:] + "/"
        for name in sorted(filenames):
            if name.startswith(".") or (not prefix and name in PLAIN_FILES):
                continue
            fd = _open_regular(dir_fd, name)
            if fd is not None:
                count += 1
                yield prefix + name, fd
            if count >= MAX_FILES:
                return


def _open_regular(dir_fd: int, name: str) -> int | None:
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None  # a symlink (O_NOFOLLOW), gone, unreadable
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
        return fd
    os.close(fd)
    return None


def _unlink_same(entry_fd: int, relative: str, info: os.stat_result) -> None:
    """Unlink ``relative`` if it is still the file that was stored (same inode)."""
    parts = relative.split("/")
    folder = os.dup(entry_fd)
    try:
        for part in parts[:-1]:
            child = os.open(part, DIR_FLAGS, dir_fd=folder)
            os.close(folder)
            folder = child
        now = os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
        if (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino):
            os.unlink(parts[-1], dir_fd=folder)
    except OSError:
        pass  # left plain: still readable, and in the manifest too
    finally:
        os.close(folder)


# --- when it runs ---------------------------------------------------------------------


def schedule_dedup(workspace: Workspace, task_id: str, run_id: str) -> threading.Thread:
    """Start :func:`dedup_entry` in a thread of its own (the submit does not wait). A
    process that exits meanwhile (a CLI's ``runyard run``) waits for it up to
    :data:`EXIT_WAIT_SECONDS`; what is left then is done by the next server start or gc."""
    thread = threading.Thread(
        target=_dedup_quietly, args=(workspace, task_id, run_id),
        name=f"dedup {task_id}", daemon=True,
    )  # fmt: skip
    with _PENDING_LOCK:
        _PENDING.add(thread)
    thread.start()
    return thread


@atexit.register
def _wait_at_exit() -> None:
    wait_pending(EXIT_WAIT_SECONDS)


def wait_pending(timeout: float) -> None:
    """Wait up to ``timeout`` seconds for the passes :func:`schedule_dedup` started."""
    deadline = time.monotonic() + timeout
    with _PENDING_LOCK:
        threads = list(_PENDING)
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def _dedup_quietly(workspace: Workspace, task_id: str, run_id: str) -> None:
    try:
        dedup_entry(workspace, task_id, run_id)
    except Exception:  # the entry stays plain and readable; gc tries again
        log.exception("Storing the files of %s run %s once failed", task_id, run_id)
    finally:
        with _PENDING_LOCK:
            _PENDING.discard(threading.current_thread())


def _dedup_or_log(workspace: Workspace, task_id: str, run_id: str) -> int:
    try:
        return dedup_entry(workspace, task_id, run_id)
    except OSError as exc:  # a full disk: the entry stays plain and readable
        log.warning("Storing the files of %s run %s once failed: %s", task_id, run_id, exc)
        return 0


def dedup_all(workspace: Workspace) -> int:
    """Store the files of every kept run still holding plain files; how many moved."""
    root = workspace.root / ".history"
    moved = 0
    for task_type in visible_dirs(root):
        for task_id in visible_dirs(root / task_type):
            if not is_task_id(task_id) or not task_id.startswith(f"{task_type}#"):
                continue
            for run_id in visible_dirs(root / task_type / task_id):
                if is_run_id(run_id):
                    moved += _dedup_or_log(workspace, task_id, run_id)
    return moved

