"""A task's kept earlier runs in its sync tar, and their place on the receiving side.

After the task's own members (:mod:`runyard.sync.tarstream`) the sender adds, for each
kept run (newest first, at most :data:`MAX_RUNS`), its files as the sender serves them
(:mod:`runyard.workspace.runfiles`: a stored file is sent as its bytes, no link is
followed) and its log::

    runs/<run_id>/files/<path>       runs/<run_id>/log

Nothing the sender's store or manifests hold is trusted by the receiver: each file arrives
as bytes, counted against the task's size limit and hashed as it is written (as every
member is), and the receiver stores it once in its own store after its own hashing
(:func:`runyard.workspace.dedup.schedule_dedup`). Names follow the task member rules
(:func:`runyard.sync.members.check_parts`), the run id is one valid component, and each
kept run must carry a ``status.json`` that is this task's, of that very run, and terminal;
otherwise the whole task is refused (422 ``bad_member`` / ``verification``) and nothing of
it is applied. An entry the receiver already keeps is left as it is.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from runyard.errors import NoSuchFile, UnsafePath
from runyard.sync.errors import SyncRefused
from runyard.sync.members import check_parts
from runyard.workspace.atomic import read_bytes_tolerant
from runyard.workspace.dedup import schedule_dedup
from runyard.workspace.filenames import name_from_shown
from runyard.workspace.history import kept_runs, status_from_bytes, task_history_dir
from runyard.workspace.identity import is_run_id
from runyard.workspace.layout import STATUS_FILE, Workspace
from runyard.workspace.records import TaskStatus
from runyard.workspace.runfiles import list_run_files, open_run_file
from runyard.workspace.safefs import OpenedFile, open_under

RUNS_PREFIX = "runs/"
STAGED_RUNS = ".runs"  # in the staging folder: hidden, so no task member can name it
MAX_RUNS = 100
MAX_STATUS_BYTES = 16 * 1024 * 1024


# --- sending ----------------------------------------------------------------------------


Member = tuple[str, OpenedFile]


def kept_run_members(workspace: Workspace, task_id: str, current: str) -> Iterator[Member]:
    """``(member name, opened file)`` of each file and log of the task's kept runs."""
    for status in kept_runs(workspace, task_id)[:MAX_RUNS]:
        run_id = status.run_id
        if run_id == current or not is_run_id(run_id):
            continue
        for item in _files_of(workspace, task_id, run_id):
            try:
                opened = open_run_file(workspace, task_id, run_id, item)
            except (NoSuchFile, UnsafePath, OSError):
                continue
            yield f"{RUNS_PREFIX}{run_id}/files/{item}", opened
        log = workspace.run_log_path(task_id, run_id)
        with contextlib.suppress(NoSuchFile, UnsafePath, OSError):
            yield f"{RUNS_PREFIX}{run_id}/log", open_under(log.parent, log.name, single_link=True)


def _files_of(workspace: Workspace, task_id: str, run_id: str) -> list[str]:
    try:
        listed = list_run_files(workspace, task_id, run_id)
    except (NoSuchFile, UnsafePath, OSError):
        return []
    names = []
    for item in listed:
        try:
            names.append(name_from_shown(item["path"]))
        except UnsafePath:
            continue
    return names


# --- receiving --------------------------------------------------------------------------


def run_member_target(task_id: str, name: str) -> str:
    """Where the member ``runs/<run_id>/...`` is staged, relative to the staging folder;
    :class:`SyncRefused` for a name that breaks the rules."""
    rest = name[len(RUNS_PREFIX) :]
    run_id, _, tail = rest.partition("/")
    if not is_run_id(run_id):
        raise SyncRefused(task_id, "bad_member", f"{name[:80]!r} names no run id")
    if tail == "log":
        return f"{STAGED_RUNS}/{run_id}/log"
    if not tail.startswith("files/"):
        raise SyncRefused(task_id, "bad_member", f"{name[:80]!r} is no file or log of a run")
    try:
        parts = check_parts(tail[len("files/") :])
    except UnsafePath as exc:
        raise SyncRefused(task_id, "bad_member", f"member {exc}") from exc
    return f"{STAGED_RUNS}/{run_id}/files/" + "/".join(parts)


def check_staged_runs(staging: Path, current: TaskStatus) -> list[str]:
    """The run ids staged under ``staging/.runs``, each checked (see the module docstring)."""
    folder = staging / STAGED_RUNS
    if not folder.is_dir():
        return []
    run_ids = sorted(os.listdir(folder))
    for run_id in run_ids:
        raw = read_bytes_tolerant(folder / run_id / "files" / STATUS_FILE, limit=MAX_STATUS_BYTES)
        status = status_from_bytes(raw, current.task_id)
        if (
            not is_run_id(run_id)
            or run_id == current.run_id
            or status is None
            or status.run_id != run_id
            or not status.terminal
        ):
            reason = f"kept run {run_id[:64]!r} has no terminal status.json of its own"
            raise SyncRefused(current.task_id, "verification", reason)
    return run_ids



def place_staged_runs(
    workspace: Workspace, staging: Path, task_id: str, run_ids: list[str]
) -> None:
    """Move the checked runs into the history (under the task's claim), their logs to the
    paths the ids derive; an entry already kept here stays. ``.runs`` leaves the staging
    folder either way, so it never becomes part of the task folder."""
    folder = staging / STAGED_RUNS
    try:
        history = task_history_dir(workspace, task_id)
        history.mkdir(parents=True, exist_ok=True, mode=0o700)
        for run_id in run_ids:
            entry = history / run_id
            if os.path.lexists(entry):
                continue
            _place_log(workspace, folder / run_id / "log", task_id, run_id)
            os.rename(folder / run_id / "files", entry)
            schedule_dedup(workspace, task_id, run_id)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _place_log(workspace: Workspace, staged: Path, task_id: str, run_id: str) -> None:
    if not staged.is_file() or staged.is_symlink():
        return
    final = workspace.run_log_path(task_id, run_id)
    if os.path.lexists(final):
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    if final.parent.is_symlink():
        return
    os.rename(staged, final)
