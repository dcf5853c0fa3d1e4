"""Retries of a failed run: a submit's ``retries`` and ``retry_delay_seconds``, or a task
class's defaults.

    policy = resolve_policy(task_cls, retries=3, delay=10.0)    # runyard.tasks.retrypolicy
    status = create_task(..., retry=policy.first_fields())      # attempt 1 of 4
    if retry_due(ended):                                        # failed, attempts left
        queued = next_attempt(workspace, ended)                 # a NEW run of the same task

A run that ends ``failed`` (not cancelled, not ``upstream failed``) while attempts are left
is followed by a new run of the same task id: its records are first kept in the task's run
history (:mod:`runyard.workspace.history`, as a fixed-name rerun keeps the run it replaces),
the files the failed attempt left in the task folder go, and the folder gets a new
``queued`` status with a new run id, ``attempt`` one higher, ``retry_at`` (when it may
queue for a slot) and a ``queued_reason`` saying so. Until then it holds no slot
(:class:`RetryWaits`). The wait before attempt ``n + 1`` is ``delay * 2**(n - 1)``, times a
jitter of +-10 %, at most :data:`MAX_DELAY_SECONDS` (one hour).

Everything a retry needs is in the status on disk (``attempt``, ``retries``,
``retry_delay_seconds``, ``retry_at``, ``retry_of``: the run id of the first attempt), so a
restarted supervisor finds a waiting retry among the queued tasks. An attempt that ends
while no supervisor watches (the server was down) is found through its mark in
``<workspace>/.retrying`` (one empty file per task id with retries, made at submit, gone
once the task has ended for good).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import random
import shutil
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from runyard.runtime.attempts import retry_due
from runyard.runtime.creation import (
    KEY_MARK_PREFIX,
    KEY_XATTR,
    claim,
    remove_task_dir,
    staging_path,
)
from runyard.runtime.gpus import without_grant
from runyard.runtime.liveness import state_event
from runyard.runtime.submitters import ADMIN, record_submitter, submitter_path
from runyard.tasks.retrypolicy import MAX_DELAY_SECONDS
from runyard.workspace.atomic import (
    dump_json,
    fsync_dir,
    read_bytes_tolerant,
    write_bytes_atomic,
    write_bytes_new,
)
from runyard.workspace.history import keep_current_run, replace_keeping
from runyard.workspace.identity import is_task_id
from runyard.workspace.layout import (
    EVENTS_FILE,
    STATUS_FILE,
    Workspace,
)
from runyard.workspace.records import TaskState, TaskStatus, utcnow
from runyard.workspace.safefs import DIR_FLAGS, closing_fd

JITTER = 0.1  # each wait is stretched or shortened by up to this share
MARKS_DIR = ".retrying"
log = logging.getLogger(__name__)


def backoff_seconds(delay: float, failed_attempt: int, jitter: float | None = None) -> float:
    """The wait after attempt ``failed_attempt`` (1-based) failed: ``delay * 2**(n-1)``,
    stretched by ``jitter`` (-1..1, random when None) times :data:`JITTER`, capped."""
    shift = random.uniform(-1.0, 1.0) if jitter is None else jitter
    base = delay * 2.0 ** min(failed_attempt - 1, 32)
    return min(MAX_DELAY_SECONDS, base * (1.0 + JITTER * shift))


def retry_reason(attempt: int, retries: int, at: str) -> str:
    return f"retry: attempt {attempt} of {retries + 1} at {at}"


def due_time(status: TaskStatus) -> float | None:
    """When a queued retry may queue for a slot (epoch seconds), or None if it is not one."""
    if status.state is not TaskState.QUEUED or not status.retry_at:
        return None
    try:
        return (
            datetime.strptime(status.retry_at, "%Y-%m-%dT%H:%M:%S.%fZ")
            .replace(tzinfo=UTC)
            .timestamp()
        )
    except ValueError:
        return 0.0  # unreadable: it waited long enough


# --- the next attempt ---------------------------------------------------------------


def next_attempt(workspace: Workspace, ended: TaskStatus) -> TaskStatus | None:
    """Make the run that follows the failed attempt ``ended``: its ``queued`` status, or
    None when the folder no longer holds that attempt or no retry is due. Under the task's
    claim: the new attempt's folder is built first, then it and the failed attempt's whole
    folder swap places in one step, the failed attempt becoming its history entry
    (:func:`replace_keeping`); until then a reader sees the failed attempt.
    """
    task_id = ended.task_id
    with claim(workspace, task_id):
        current = workspace.read_status(task_id)
        if current is None or current.run_id != ended.run_id or not retry_due(current):
            return None
        queued = _queued_retry(workspace, current)
        old_dir = workspace.task_dir(task_id)
        record = submitter_path(workspace, task_id)
        before = read_bytes_tolerant(record)
        record_submitter(workspace, task_id, queued.run_id, current.submitted_by or ADMIN, queued)
        try:
            build = functools.partial(_fill_attempt, old_dir, queued)
            if not replace_keeping(workspace, task_id, current.run_id, build):
                _replace_in_two_steps(workspace, queued, old_dir)
        except BaseException:  # the failed attempt stays the task: its record goes back
            if before is not None:
                write_bytes_atomic(record, before, sync_dir=True, mode=0o600)
            raise
    return queued


def _replace_in_two_steps(workspace: Workspace, queued: TaskStatus, old_dir: Path) -> None:
    """Where folders cannot be exchanged: build under a staging name, keep the old folder,
    rename the new one into place (a reader may find no folder in between)."""
    staged = staging_path(workspace, queued.task_id)
    staged.mkdir(mode=0o700)
    try:
        _fill_attempt(old_dir, queued, staged)
        keep_current_run(workspace, queued.task_id)
        remove_task_dir(workspace, queued.task_id)  # only where the history could not take it
        os.rename(staged, old_dir)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    fsync_dir(old_dir.parent)


def _fill_attempt(old_dir: Path, queued: TaskStatus, folder: Path) -> None:
    """Fill the new attempt's folder: the submit's key marks of the old folder, the
    ``queued`` event and status, synced."""
    _carry_key_marks(old_dir, folder)
    event = state_event(TaskState.QUEUED, queued.created_at)
    line = json.dumps(event, separators=(",", ":")).encode() + b"\n"
    write_bytes_new(folder / EVENTS_FILE, line)
    write_bytes_new(folder / STATUS_FILE, dump_json(queued.to_json()))
    fsync_dir(folder)


def _carry_key_marks(old: Path, new: Path) -> None:
    """Copy the marks that say which submit key made the task (see creation.mark_for_key):
    the folder's extended attribute, or the empty mark files; nothing is followed."""
    with contextlib.suppress(OSError):
        os.setxattr(new, KEY_XATTR, os.getxattr(old, KEY_XATTR, follow_symlinks=False))
    with closing_fd(os.open(old, DIR_FLAGS)) as folder, os.scandir(folder) as entries:
        marks = [e.name for e in entries if e.name.startswith(KEY_MARK_PREFIX)]
    for name in marks:
        os.close(os.open(new / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))


def _queued_retry(workspace: Workspace, failed: TaskStatus) -> TaskStatus:
    """The failed attempt's status as a new queued run: what the submit recorded (inputs,
    submitter, retry policy, cache key...) carried on; what the attempt did (its times,
    error, result, steps, limits, and fields a worker added) left behind."""
    attempt = (failed.attempt or 1) + 1
    retries = failed.retries or 0
    wait = backoff_seconds(failed.retry_delay_seconds or 0.0, attempt - 1)
    at = (datetime.now(UTC) + timedelta(seconds=wait)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    run_id = uuid.uuid4().hex
    declared = {name: getattr(failed, name) for name in TaskStatus.model_fields}  # no extras
    return TaskStatus.model_validate(
        declared
        | {
            "run_id": run_id, "state": TaskState.QUEUED, "created_at": utcnow(),
            "started_at": None, "finished_at": None, "pid": None, "exit_code": 0, "error": "",
            "result": {}, "steps": [], "limits": None, "waiting_for": None,
            "resources": without_grant(failed.resources),
            "log_path": os.path.abspath(workspace.run_log_path(failed.task_id, run_id)),
            "attempt": attempt, "retry_at": at, "retry_of": failed.retry_of or failed.run_id,
            "queued_reason": retry_reason(attempt, retries, at),
        }
    )  # fmt: skip



# --- marks: tasks whose attempts may end unwatched ----------------------------------


def mark(workspace: Workspace, task_id: str) -> None:
    """Note that ``task_id`` has retries (an empty file named by it)."""
    folder = workspace.root / MARKS_DIR
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        os.close(os.open(folder / task_id, flags, 0o600))
    except OSError as exc:  # the task is made: only a retry after an unwatched end is lost
        log.warning("Cannot mark %s as retried: %s", task_id, exc)


def unmark(workspace: Workspace, task_id: str) -> None:
    with contextlib.suppress(OSError):
        (workspace.root / MARKS_DIR / task_id).unlink()


def marked(workspace: Workspace) -> list[str]:
    """The task ids with a mark (names that are not task ids are passed over)."""
    try:
        with os.scandir(workspace.root / MARKS_DIR) as entries:
            return sorted(e.name for e in entries if is_task_id(e.name))
    except OSError:
        return []


# --- the retries waiting for their time ---------------------------------------------


@dataclass(frozen=True)
class Waiting:
    run_id: str
    owner: str | None  # the slot owner it will queue under (see runtime.fairqueue)
    due: float  # epoch seconds


class RetryWaits:
    """The retries waiting for their time, by task id (the supervisor's lock guards it)."""

    def __init__(self) -> None:
        self._entries: dict[str, Waiting] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, task_id: str, run_id: str, owner: str | None, due: float) -> None:
        self._entries[task_id] = Waiting(run_id, owner, due)

    def take(self, task_id: str) -> Waiting | None:
        return self._entries.pop(task_id, None)

    def clear(self) -> None:
        self._entries.clear()

    def next_due(self) -> float | None:
        return min((entry.due for entry in self._entries.values()), default=None)

    def take_due(self, now: float) -> list[tuple[str, Waiting]]:
        """Take out the retries whose time has come, soonest first."""
        due = sorted(
            ((task_id, e) for task_id, e in self._entries.items() if e.due <= now),
            key=lambda item: item[1].due,
        )
        for task_id, _ in due:
            del self._entries[task_id]
        return due
