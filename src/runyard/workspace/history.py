"""Earlier runs of a task, kept whole when a fixed-name rerun or a retry replaces its folder.

The seed's layout has one folder per task id, and a rerun with the same fixed name (or the
next attempt of a retry) replaces it. Before that happens the replaced run's whole folder
(records, metrics, params, artifacts, outputs) is renamed, as it is, to::

    <workspace>/.history/<task_type>/<task_id>/<run_id>/

One rename, whatever the folder holds: a rerun of a task with a 1 GB artifact copies
nothing under the claim. The rename is atomic on one file system: before it the old run is
the task, after it the entry is whole. Where ``.history`` is on another file system than
the type folder (a mount), the records alone are copied as earlier versions did: into a
hidden folder ``.history/.staging/.tmp-<random>-<task id>``, synced, and renamed to
``<task_id>/<run_id>``. A leftover copy is never listed, and the server's start removes it
(:mod:`runyard.runtime.leftovers`) by listing that one folder, whatever the number of tasks.

Identical files of kept runs are then stored once, in the background
(:mod:`runyard.workspace.dedup`): each entry's other files move into the content-addressed
store ``.history/.blobs`` and the entry's manifest ``.<run_id>.files.json`` (beside the
entry, where the task never wrote) lists them. :func:`run_dir` and :func:`run_ids` name
the runs; :mod:`runyard.workspace.runfiles` lists and opens their files.

A task can write its own folder, so everything in an entry is untrusted: records are read
through :func:`open_under` (no symlink, no hard link, regular files only) and capped in
size; the history folders are created and written relative to descriptors opened without
following symlinks.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runyard.errors import NoSuchFile, RunMismatch, UnsafePath
from runyard.faults import fault_point
from runyard.tracking.points import METRICS_FILE, PARAMS_FILE
from runyard.workspace.dedup import manifest_name, schedule_dedup
from runyard.workspace.exchange import ExchangeUnsupported, exchange
from runyard.workspace.identity import RUN_ID_RE, is_run_id, is_task_id, parse_task_id
from runyard.workspace.layout import EVENTS_FILE, METADATA_FILE, STATUS_FILE, Workspace
from runyard.workspace.records import TaskStatus, status_from_dict
from runyard.workspace.safefs import (
    DIR_FLAGS,
    closing_fd,
    make_dirs_at,
    open_under,
    visible_dirs,
)

# a type folder is the operator's, never a task's: it may be a link to another disk (its
# tasks' folders then cannot be renamed into .history, and their records are copied)
TYPE_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
HISTORY_DIR = ".history"
KEPT_FILES = (STATUS_FILE, METADATA_FILE, EVENTS_FILE, METRICS_FILE, PARAMS_FILE)
MAX_KEPT_BYTES = 64 * 1024 * 1024  # per file: a task cannot fill the disk through history
TMP_PREFIX = ".tmp-"
STAGING_DIR = ".staging"  # in .history: the copies being made, of every task
_TOKEN_LEN = 12  # the random part of a copy's name, in hex digits
log = logging.getLogger(__name__)


def history_root(workspace: Workspace) -> Path:
    return workspace.root / HISTORY_DIR


def task_history_dir(workspace: Workspace, task_id: str) -> Path:
    tid = parse_task_id(task_id)
    return history_root(workspace) / tid.task_type / str(tid)


def keep_current_run(workspace: Workspace, task_id: str) -> str | None:
    """Move the current run's whole folder into history; its run id, or None when the
    folder has no readable status (a broken folder has no run to keep) and stays.

    Call under the task's claim, before the folder is replaced: afterwards the task has no
    folder. An entry of that run id already there (a records copy an earlier version made
    before a crash) is replaced by the whole folder.
    """
    records = _read_records(workspace.task_dir(task_id), (STATUS_FILE,))
    status = status_from_dict(_json(records.get(STATUS_FILE)), task_id)
    if status is None or not RUN_ID_RE.match(status.run_id):
        return None
    tid = parse_task_id(task_id)
    with (
        closing_fd(make_dirs_at(workspace.root, [HISTORY_DIR, STAGING_DIR])) as staging,
        closing_fd(make_dirs_at(workspace.root, [HISTORY_DIR, tid.task_type, str(tid)])) as parent,
        closing_fd(os.open(workspace.type_dir(tid.task_type), TYPE_DIR_FLAGS)) as type_dir,
    ):
        aside = None
        if _exists(parent, status.run_id):
            aside = f"{TMP_PREFIX}{secrets.token_hex(_TOKEN_LEN // 2)}-{tid}"
            os.rename(status.run_id, aside, src_dir_fd=parent, dst_dir_fd=staging)
        try:
            _move_entry(workspace, task_id, type_dir, parent, status.run_id)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            _copy_records(workspace, task_id, staging, parent, status.run_id)
        if aside is not None:
            _remove_at(staging, aside)
    schedule_dedup(workspace, task_id, status.run_id)
    return status.run_id


def replace_keeping(
    workspace: Workspace, task_id: str, run_id: str, build: Callable[[Path], None]
) -> bool:
    """Replace the task folder, which holds run ``run_id``, by a new one that ``build``
    fills, the old folder becoming that run's history entry, in one atomic exchange: no
    reader ever finds the task without a folder. False (nothing changed) where the file
    system cannot exchange; the caller then keeps and replaces in two steps.

    The new folder is built at the entry's own name (``.history/.../<run_id>``): a crash
    before the exchange leaves there a folder whose status names another run, which no
    reader lists and the next keep replaces. Call under the task's claim.
    """
    tid = parse_task_id(task_id)
    entry = task_history_dir(workspace, task_id) / run_id
    with (
        closing_fd(make_dirs_at(workspace.root, [HISTORY_DIR, STAGING_DIR])) as staging,
        closing_fd(make_dirs_at(workspace.root, [HISTORY_DIR, tid.task_type, str(tid)])) as parent,
        closing_fd(os.open(workspace.type_dir(tid.task_type), TYPE_DIR_FLAGS)) as type_dir,
    ):
        _set_aside(staging, parent, run_id, str(tid))
        os.mkdir(run_id, 0o700, dir_fd=parent)
        try:
            build(entry)
            fault_point("history.staged")
            exchange(type_dir, task_id, parent, run_id)
        except BaseException as exc:
            _remove_at(parent, run_id)
            if isinstance(exc, ExchangeUnsupported):
                return False
            raise
        os.fsync(parent)
        os.fsync(type_dir)
        fault_point("history.kept")
    schedule_dedup(workspace, task_id, run_id)
    return True


def _set_aside(staging: int, parent: int, run_id: str, task_id: str) -> None:
    """Move an entry ``run_id`` already in ``parent`` (a crash's leftover) into staging and
    remove it there."""
    if not _exists(parent, run_id):
        return
    aside = f"{TMP_PREFIX}{secrets.token_hex(_TOKEN_LEN // 2)}-{task_id}"
    os.rename(run_id, aside, src_dir_fd=parent, dst_dir_fd=staging)
    _remove_at(staging, aside)


def _move_entry(
    workspace: Workspace, task_id: str, type_dir: int, parent: int, run_id: str
) -> None:
    """Rename the task folder to the entry ``run_id`` of ``parent``; sync both folders."""
    fault_point("history.staged")
    os.rename(task_id, run_id, src_dir_fd=type_dir, dst_dir_fd=parent)
    os.fsync(parent)
    os.fsync(type_dir)
    fault_point("history.kept")


def _copy_records(
    workspace: Workspace, task_id: str, staging: int, parent: int, run_id: str
) -> None:
    """Where the rename cannot cross file systems: copy the records into the entry."""
    log.warning("%s: history is on another file system; only its records are kept", task_id)
    records = _read_records(workspace.task_dir(task_id), KEPT_FILES)
    tmp = f"{TMP_PREFIX}{secrets.token_hex(_TOKEN_LEN // 2)}-{task_id}"
    _write_entry(staging, tmp, parent, run_id, records)


def _read_records(task_dir: Path, names: tuple[str, ...]) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for name in names:
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


def status_from_bytes(raw: bytes | None, task_id: str) -> TaskStatus | None:
    """A status record's bytes (read from a folder a task or a peer wrote) as the valid
    status of ``task_id``; None for anything else."""
    return status_from_dict(_json(raw), task_id)


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
        with closing_fd(os.open(tmp, DIR_FLAGS, dir_fd=staging)) as folder:
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
    with closing_fd(os.open(name, flags, 0o600, dir_fd=folder)) as fd:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)




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
    for run_id in visible_dirs(folder):
        status = _kept_status(workspace, task_id, run_id) if is_run_id(run_id) else None
        if status is not None:
            found.append(status)
    return sorted(found, key=lambda s: s.created_at, reverse=True)



def remove_history(workspace: Workspace, task_id: str) -> bool:
    """Remove every kept run of ``task_id`` (with the task itself); True if any existed."""
    folder = task_history_dir(workspace, task_id)
    if not os.path.lexists(folder):
        return False
    with closing_fd(os.open(folder.parent, DIR_FLAGS)) as parent:
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
    with closing_fd(parent):
        present = _exists(parent, task_id)
        _remove_at(parent, task_id)
    return present


def remove_kept_runs(workspace: Workspace, task_id: str, run_ids: set[str]) -> list[str]:
    """Remove the kept runs ``run_ids`` of ``task_id`` with their manifests (and leftover
    temp folders of crashed copies); the run ids that were there and went. Their blobs
    stay until a sweep finds no manifest naming them (:mod:`runyard.retention.blobs`)."""
    folder = task_history_dir(workspace, task_id)
    try:
        fd = os.open(folder, DIR_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    with closing_fd(fd):
        present = set(visible_dirs(folder))
        for name in sorted(run_ids & present):
            _remove_at(fd, name)
            _remove_at(fd, manifest_name(name))
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
    with closing_fd(fd), os.scandir(fd) as entries:
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
    with closing_fd(fd):
        present = _exists(fd, name)
        _remove_at(fd, name)
    return present


def history_task_ids(workspace: Workspace) -> list[str]:
    """Every task id with kept runs (whether or not the task still exists)."""
    root = history_root(workspace)
    ids = []
    for task_type in visible_dirs(root):
        for name in visible_dirs(root / task_type):
            if name.startswith(f"{task_type}#") and is_task_id(name):
                ids.append(name)
    return ids


# --- one run, by its id ----------------------------------------------------------------


def run_dir(workspace: Workspace, task_id: str, run_id: str) -> Path | None:
    """The folder holding run ``run_id``'s record files as plain files: the task folder for
    the current run, the kept entry for an earlier run, None when there is no such run (or
    ``run_id`` is no run id). The folder is untrusted: open what is in it with
    :func:`open_under`."""
    if not is_run_id(run_id):
        return None
    current = workspace.read_status(task_id)
    if current is not None and current.run_id == run_id:
        return workspace.task_dir(task_id)
    entry = task_history_dir(workspace, task_id) / run_id
    if entry.is_dir() and not entry.is_symlink() and _kept_status(workspace, task_id, run_id):
        return entry
    return None


def _kept_status(workspace: Workspace, task_id: str, run_id: str) -> TaskStatus | None:
    folder = task_history_dir(workspace, task_id)
    try:
        with open_under(folder, f"{run_id}/{STATUS_FILE}", single_link=True) as opened:
            raw = _read_capped(opened.fd)
    except (NoSuchFile, UnsafePath):
        return None
    status = status_from_dict(_json(raw), task_id)
    return status if status is not None and status.run_id == run_id else None


def run_status(workspace: Workspace, task_id: str, run_id: str) -> TaskStatus | None:
    """The status of run ``run_id`` (current or kept); None when there is no such run."""
    if not is_run_id(run_id):
        return None
    current = workspace.read_status(task_id)
    if current is not None and current.run_id == run_id:
        return current
    return _kept_status(workspace, task_id, run_id)


def kept_run_log(workspace: Workspace, current: TaskStatus, run_id: str) -> str:
    """The log path of run ``run_id`` of ``current``'s task, derived from the ids alone
    (``<log_dir>/<type>/<task_id>/<run_id>.log``; a rerun or a retry leaves it there);
    RunMismatch when the task has no such run, current or kept."""
    if run_status(workspace, current.task_id, run_id) is None:
        raise RunMismatch(current.task_id, run_id, current.run_id)
    return os.path.abspath(workspace.run_log_path(current.task_id, run_id))


def run_ids(workspace: Workspace, task_id: str) -> list[str]:
    """Every run of ``task_id``: the current one first, then the kept ones newest first."""
    current = workspace.read_status(task_id)
    ids = [current.run_id] if current is not None else []
    return ids + [s.run_id for s in kept_runs(workspace, task_id) if s.run_id not in ids]


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
