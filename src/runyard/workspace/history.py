"""Earlier runs of a task, kept when a fixed-name rerun replaces its folder.

The seed's layout has one folder per task id, and a rerun with the same fixed name
replaces it. Before that happens the replaced run's records are copied to::

    <workspace>/.history/<task_type>/<task_id>/<run_id>/{status.json,metadata.json,events.jsonl}

The task folder itself stays exactly as the seed has it. Copying is crash-safe: the files
are written into a hidden folder ``.history/.staging/.tmp-<random>-<task id>``, synced, and
renamed to ``<task_id>/<run_id>``; the old folder is removed only after that. A crash
leaves either no entry (the old folder is still in place) or a whole one (which the next
replace finds and keeps); a leftover copy is never listed, and the server's start removes
it (:mod:`runyard.runtime.leftovers`) by listing that one folder, whatever the number of
tasks. (``.tmp-*`` folders beside the entries, where older versions built them, go at the
next prune.)

A task can write its own folder, so records are read through :func:`open_under` (no
symlink, no hard link, regular files only) and capped in size; the history folders are
created and written relative to descriptors opened without following symlinks.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runyard.errors import NoSuchFile, UnsafePath
from runyard.faults import fault_point
from runyard.workspace.identity import RUN_ID_RE, is_task_id, parse_task_id
from runyard.workspace.layout import EVENTS_FILE, METADATA_FILE, STATUS_FILE, Workspace
from runyard.workspace.records import TaskStatus, status_from_dict
from runyard.workspace.safefs import DIR_FLAGS, open_under

HISTORY_DIR = ".history"
KEPT_FILES = (STATUS_FILE, METADATA_FILE, EVENTS_FILE)
MAX_KEPT_BYTES = 64 * 1024 * 1024  # per file: a task cannot fill the disk through history
TMP_PREFIX = ".tmp-"
STAGING_DIR = ".staging"  # in .history: the copies being made, of every task
_TOKEN_LEN = 12  # the random part of a copy's name, in hex digits


def history_root(workspace: Workspace) -> Path:
    return workspace.root / HISTORY_DIR


def task_history_dir(workspace: Workspace, task_id: str) -> Path:
    tid = parse_task_id(task_id)
    return history_root(workspace) / tid.task_type / str(tid)


def keep_current_run(workspace: Workspace, task_id: str) -> str | None:
    """Copy the current run's records into history; its run id, or None when the folder
    has no readable status (a broken folder has no run to keep).

    Call under the task's claim, before the folder is replaced. An entry that already
    exists (kept by an earlier attempt that crashed before the replace) is left as it is.
    """
    records = _read_records(workspace.task_dir(task_id))
    status = status_from_dict(_json(records.get(STATUS_FILE)), task_id)
    if status is None or not RUN_ID_RE.match(status.run_id):
        return None
    tid = parse_task_id(task_id)
    with (
        _opened(_make_dirs(workspace.root, [HISTORY_DIR, STAGING_DIR])) as staging,
        _opened(_make_dirs(workspace.root, [HISTORY_DIR, tid.task_type, str(tid)])) as parent,
    ):
        if _exists(parent, status.run_id):
            return status.run_id
        tmp = f"{TMP_PREFIX}{secrets.token_hex(_TOKEN_LEN // 2)}-{tid}"
        _write_entry(staging, tmp, parent, status.run_id, records)
    return status.run_id


def _read_records(task_dir: Path) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for name in KEPT_FILES:
        try:
            with open_under(task_dir, name, single_link=True) as opened:
                found[name] = _read_capped(opened.fd)
        except (NoSuchFile, UnsafePath):
            continue
    return found


def _read_capped(fd: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < MAX_KEPT_BYTES:
        chunk = os.read(fd, min(1 << 20, MAX_KEPT_BYTES - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _json(raw: bytes | None) -> dict[str, object] | None:
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _write_entry(
    staging: int, tmp: str, parent: int, run_id: str, records: dict[str, bytes]
) -> None:
    """Write the files into ``tmp`` in the staging folder, sync, rename it to ``run_id`` in
    ``parent``, sync the parent."""
    os.mkdir(tmp, 0o700, dir_fd=staging)
    try:
        with _opened(os.open(tmp, DIR_FLAGS, dir_fd=staging)) as folder:
            for name, data in records.items():
                _write_file(folder, name, data)
            os.fsync(folder)
        fault_point("history.staged")
        os.rename(tmp, run_id, src_dir_fd=staging, dst_dir_fd=parent)
    except BaseException:
        _remove_at(staging, tmp)
        raise
    os.fsync(parent)
    fault_point("history.kept")


def _write_file(folder: int, name: str, data: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with _opened(os.open(name, flags, 0o600, dir_fd=folder)) as fd:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)


def _make_dirs(root: Path, parts: list[str]) -> int:
    """A descriptor of ``root/parts...``, creating folders, following no symlink."""
    fd = os.open(root, DIR_FLAGS)
    for part in parts:
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, 0o700, dir_fd=fd)
        try:
            child = os.open(part, DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = child
    return fd


@contextlib.contextmanager
def _opened(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


def _exists(parent: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _remove_at(parent: int, name: str) -> None:
    """Remove the entry ``name`` of an open folder (rmtree never follows symlinks)."""
    try:
        shutil.rmtree(name, dir_fd=parent)
    except NotADirectoryError:
        os.unlink(name, dir_fd=parent)
    except FileNotFoundError:
        pass


# --- reading and pruning -------------------------------------------------------------


def kept_runs(workspace: Workspace, task_id: str) -> list[TaskStatus]:
    """The statuses of the kept earlier runs of ``task_id``, newest first."""
    folder = task_history_dir(workspace, task_id)
    found = []
    for run_id in _entries(folder):
        try:
            with open_under(folder, f"{run_id}/{STATUS_FILE}", single_link=True) as opened:
                raw = _read_capped(opened.fd)
        except (NoSuchFile, UnsafePath):
            continue
        status = status_from_dict(_json(raw), task_id)
        if status is not None and status.run_id == run_id:
            found.append(status)
    return sorted(found, key=lambda s: s.created_at, reverse=True)


def _entries(folder: Path) -> list[str]:
    try:
        with os.scandir(folder) as entries:
            return sorted(
                e.name
                for e in entries
                if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)
            )
    except (FileNotFoundError, NotADirectoryError):
        return []


def remove_history(workspace: Workspace, task_id: str) -> bool:
    """Remove every kept run of ``task_id`` (with the task itself); True if any existed."""
    folder = task_history_dir(workspace, task_id)
    if not os.path.lexists(folder):
        return False
    with _opened(os.open(folder.parent, DIR_FLAGS)) as parent:
        _remove_at(parent, folder.name)
    return True


def remove_task_logs(workspace: Workspace, task_id: str) -> bool:
    """Remove the log folder of ``task_id`` (every run's log); True if it existed.

    The path comes from the validated id alone; the type folder is opened without
    following a symlink and nothing below it is followed either.
    """
    tid = parse_task_id(task_id)
    try:
        parent = os.open(workspace.log_dir / tid.task_type, DIR_FLAGS)
    except OSError:  # no such folder, or a symlink in its place: nothing of ours to remove
        return False
    with _opened(parent):
        present = _exists(parent, task_id)
        _remove_at(parent, task_id)
    return present


def remove_kept_runs(workspace: Workspace, task_id: str, run_ids: set[str]) -> list[str]:
    """Remove the kept runs ``run_ids`` of ``task_id`` (and leftover temp folders of
    crashed copies); the run ids that were there and went."""
    folder = task_history_dir(workspace, task_id)
    try:
        fd = os.open(folder, DIR_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    with _opened(fd):
        present = set(_entries(folder))
        for name in sorted(run_ids & present):
            _remove_at(fd, name)
            removed.append(name)
        for name in _temp_names(folder):
            _remove_at(fd, name)
    return removed


def _temp_names(folder: Path) -> list[str]:
    with os.scandir(folder) as entries:
        return [e.name for e in entries if e.name.startswith(TMP_PREFIX)]


def staged_copies(workspace: Workspace) -> list[tuple[str, str | None]]:
    """The copies in ``.history/.staging`` (left by a crash, or being made now): each name
    with the task id it is for, or None when the name names none."""
    try:
        fd = os.open(history_root(workspace) / STAGING_DIR, DIR_FLAGS)
    except OSError:  # none yet, or a link in its place: nothing of ours
        return []
    with _opened(fd), os.scandir(fd) as entries:
        names = sorted(e.name for e in entries if e.name.startswith(TMP_PREFIX))
    return [(name, _copy_task_id(name)) for name in names]


def _copy_task_id(name: str) -> str | None:
    task_id = name[len(TMP_PREFIX) + _TOKEN_LEN + 1 :]
    return task_id if is_task_id(task_id) else None


def remove_staged_copy(workspace: Workspace, name: str) -> bool:
    """Remove the copy ``name`` from ``.history/.staging`` (a link there is not followed);
    whether it was there. Call under the claim of its task: the copy holds it."""
    try:
        fd = os.open(history_root(workspace) / STAGING_DIR, DIR_FLAGS)
    except OSError:
        return False
    with _opened(fd):
        present = _exists(fd, name)
        _remove_at(fd, name)
    return present


def history_task_ids(workspace: Workspace) -> list[str]:
    """Every task id with kept runs (whether or not the task still exists)."""
    root = history_root(workspace)
    ids = []
    for task_type in _entries(root):
        for name in _entries(root / task_type):
            if name.startswith(f"{task_type}#") and is_task_id(name):
                ids.append(name)
    return ids


# --- the runs of a task, as the API and the CLI show them ----------------------------

RUN_FIELDS = ("run_id", "state", "created_at", "started_at", "finished_at", "exit_code", "error")


def runs_answer(task_id: str, current: TaskStatus | None, kept: list[TaskStatus]) -> dict[str, Any]:
    """``{"task_id", "runs": [...]}``: the current run first, then kept runs newest first.

    Each run: ``run_id, state, created_at, started_at, finished_at, exit_code, error,
    current``, and ``attempt`` for the runs of a task with retries (each attempt is a run).
    A kept run with the current run's id (a copy left by a crash) is not repeated.
    """
    runs = []
    if current is not None:
        runs.append(_run_entry(current, True))
    seen = {current.run_id} if current is not None else set()
    runs += [_run_entry(status, False) for status in kept if status.run_id not in seen]
    return {"task_id": task_id, "runs": runs}


def _run_entry(status: TaskStatus, current: bool) -> dict[str, Any]:
    data = status.model_dump(mode="json", include=set(RUN_FIELDS))
    entry = {**{name: data.get(name) for name in RUN_FIELDS}, "current": current}
    if status.attempt is not None:
        entry["attempt"] = status.attempt
    return entry
