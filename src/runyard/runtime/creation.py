"""Creating a task's records: validate, pick the folder, claim it, write the ``queued`` status.

Rules (DESIGN section 2): an omitted or empty ``task_name`` is generated and never reuses an
existing folder; a fixed name replaces only a finished task, a metadata-only folder or a
broken one (no records, corrupt status) — an active one raises :class:`TaskActive`; the
replaced run's records are first kept under ``.history`` (:mod:`runyard.workspace.history`).
Every change to one task id happens under its claim (:func:`claim`: a lock on one byte of
``<workspace>/.claims``), so of two concurrent submits of one fixed name, in threads or in
separate processes, exactly one wins. A replaced folder is renamed aside and then removed;
logs live elsewhere, so an earlier run's log is never touched.

A new folder appears whole or not at all: it is built in ``<workspace>/.staging`` under a
hidden name (``.staging-<random>-<task id>``) with its first ``events.jsonl`` and
``status.json``, then renamed into its type folder. A crash leaves at most a staging
folder, which no listing shows and :func:`runyard.runtime.orphans.reconcile_orphans`
removes; a full disk raises :class:`InsufficientStorage` and leaves nothing.

Both the staging folders and the claims are kept out of the type folders, which the index
watches: there a new folder cost the watcher its events, a watch of its own and a second
walk when it was renamed; from outside, the folder arrives whole in one event (about
0.3-0.5 ms of server CPU a submit, ``bench/floor.py``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import shutil
import stat
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runyard.errors import InvalidInput, RunyardError, TaskActive, TaskNameTaken
from runyard.faults import fault_point
from runyard.runtime.liveness import settle, state_event, worker_alive
from runyard.runtime.submitters import ADMIN, Submitter, record_submitter, session_of
from runyard.tasks.base import TaskInput
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.atomic import (
    dump_json,
    fsync_dir,
    read_bytes_tolerant,
    write_bytes_new,
)
from runyard.workspace.events import append_event
from runyard.workspace.history import keep_current_run
from runyard.workspace.identity import build_task_id, generate_task_name
from runyard.workspace.layout import EVENTS_FILE, STATUS_FILE, Workspace
from runyard.workspace.records import TaskState, TaskStatus, utcnow
from runyard.workspace.space import is_space_error, storage_error

NAME_ATTEMPTS = 64
MARK_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
CLAIMS_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
STAGING_PREFIX = ".staging-"
# a folder created for a request that carried an Idempotency-Key is marked with the key's
# hash: in the extended attribute KEY_XATTR of the folder, or, where the file system keeps
# none (and in folders of the versions before), in the name of an empty file
# (:func:`key_mark`); older folders still hold the key inside ``IDEMPOTENCY_FILE``
KEY_XATTR = "user.runyard.key"
KEY_MARK_PREFIX = ".idempotency."
IDEMPOTENCY_FILE = ".idempotency-key"


def key_mark(key: str) -> str:
    """The name of the empty file that marks a folder as made for ``key``."""
    return KEY_MARK_PREFIX + hashlib.sha256(key.encode()).hexdigest()


def _key_digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def mark_for_key(folder: Path, key: str) -> None:
    """Mark ``folder`` as made for ``key``; durable with the folder's own fsync.

    The mark is an extended attribute of the folder (in the inode itself on ext4), not a
    file: each file would cost the task an inode, and on ext4 without a journal every
    file made in the next minutes pays for each inode freed (see ``bench/floor.py``).
    Where the folder takes none (a file system without them, or a full one with no room
    for it), an empty file named by the key's hash: all names and no data, made durable by
    the same fsync; should that fail too, its error is the caller's.
    """
    try:
        os.setxattr(folder, KEY_XATTR, _key_digest(key), follow_symlinks=False)
    except OSError:
        os.close(os.open(folder / key_mark(key), MARK_FLAGS, 0o644))


def made_for_key(folder: Path, key: str) -> bool:
    """Whether ``folder`` was made for ``key`` (marked by this version or an earlier one)."""
    with contextlib.suppress(OSError):
        if os.getxattr(folder, KEY_XATTR, follow_symlinks=False) == _key_digest(key):
            return True
    if os.path.lexists(folder / key_mark(key)):
        return True
    return read_bytes_tolerant(folder / IDEMPOTENCY_FILE) == key.encode()


def create_task(
    workspace: Workspace,
    registry: TaskRegistry,
    task: str,
    inputs: dict[str, Any],
    submitted_by: Submitter = ADMIN,
    idempotency_key: str | None = None,
    waiting_for: list[str] | None = None,
    retry: dict[str, Any] | None = None,
    cache: dict[str, Any] | None = None,
    resources: dict[str, Any] | None = None,
) -> TaskStatus:
    """Validate ``inputs`` for ``task`` and write its ``queued`` records; the new status.
    ``waiting_for`` (upstream ids, see :mod:`runyard.runtime.dependencies`) is kept in it,
    and so are the ``retry`` fields (:meth:`runyard.runtime.retries.RetryPolicy.first_fields`)
    and the ``cache`` ones (:meth:`runyard.runtime.taskcache.CachePlan.status_fields`),
    and the run's ``resources`` (:mod:`runyard.runtime.resources`).

    Raises :class:`UnknownTask`, :class:`InvalidInput` (nothing is written) or
    :class:`TaskActive` for a fixed name whose task is still queued or running. A task
    submitted by an agent run (``submitted_by`` a dict) may replace only a task of its
    own session: :class:`TaskNameTaken` otherwise. A full disk raises
    :class:`InsufficientStorage` with nothing created. ``idempotency_key`` is kept in the
    new folder (written before it appears), so a retried request finds the task it made.
    """
    try:
        return _create(
            workspace, registry, task, inputs, submitted_by, idempotency_key, waiting_for,
            {**(retry or {}), "resources": resources}, cache or {},
        )  # fmt: skip
    except OSError as exc:
        if is_space_error(exc):
            raise storage_error(exc, f"submit task {task}") from exc
        raise


def _create(
    workspace: Workspace,
    registry: TaskRegistry,
    task: str,
    inputs: dict[str, Any],
    submitted_by: Submitter,
    key: str | None,
    waiting_for: list[str] | None = None,
    retry: dict[str, Any] | None = None,
    cache: dict[str, Any] | None = None,
) -> TaskStatus:
    registered = registry.get(task)
    if not isinstance(inputs, dict):
        raise InvalidInput(f"Inputs of task {task} must be an object of field values")
    typed = registry.validate_inputs(task, inputs)
    task_type = registered.definition.task_type
    if typed.task_name:
        task_id = build_task_id(task_type, task, typed.task_name)
        if waiting_for and task_id in waiting_for:  # before the task it names is replaced
            raise InvalidInput(f"{task_id} cannot depend on itself")
        with claim(workspace, task_id):
            _check_replaceable_by(workspace, task_id, submitted_by)
            clear_for_reuse(workspace, task_id)
            return _write_queued(
                workspace, task_id, task, typed, submitted_by, key, waiting_for, retry, cache
            )
    for attempt in range(NAME_ATTEMPTS):
        task_id = build_task_id(task_type, task, generate_task_name(task, attempt))
        with claim(workspace, task_id):
            if not os.path.lexists(workspace.task_dir(task_id)):
                return _write_queued(
                    workspace, task_id, task, typed, submitted_by, key, waiting_for, retry,
                    cache,
                )
    raise RunyardError(f"Could not find a free generated name for task {task}")


@contextlib.contextmanager
def claim(workspace: Workspace, task_id: str) -> Iterator[None]:
    """Hold the claim of ``task_id`` (threads and processes alike) while the body runs.

    An open file description lock (``F_OFD_SETLKW``) on the id's byte of one lock file: it
    belongs to this open, so threads of one process exclude each other as processes do,
    and it goes with the descriptor, or with the process when it dies. No file is made or
    removed per claim: each would cost an inode, and on ext4 without a journal every file
    made in the next minutes pays for each inode freed (see ``bench/floor.py``).
    """
    fd, offset = _claims_file(workspace, task_id)
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLKW, _byte_lock(fcntl.F_WRLCK, offset))
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def claim_if_free(workspace: Workspace, task_id: str) -> Iterator[bool]:
    """:func:`claim` without waiting: True while it is held, False (and nothing held) when
    another thread or process holds it now."""
    fd, offset = _claims_file(workspace, task_id)
    try:
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _byte_lock(fcntl.F_WRLCK, offset))
        except (BlockingIOError, PermissionError):  # EAGAIN or EACCES: held
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _claims_file(workspace: Workspace, task_id: str) -> tuple[int, int]:
    """The claims file, open, and the byte of ``task_id`` in it."""
    path, offset = workspace.claim_slot(task_id)
    try:
        return os.open(path, CLAIMS_FLAGS, 0o644), offset
    except FileNotFoundError:  # a workspace not made yet
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, CLAIMS_FLAGS, 0o644), offset


def _byte_lock(kind: int, offset: int) -> bytes:
    """A ``struct flock`` for one byte at ``offset`` (``l_pid`` 0, as OFD locks need)."""
    return struct.pack("@hhqqi4x", kind, os.SEEK_SET, offset, 1, 0)


def clear_for_reuse(workspace: Workspace, task_id: str) -> None:
    """Remove a finished, metadata-only or broken folder; :class:`TaskActive` if it is live.

    A final status makes the folder replaceable even while its worker is still exiting.
    Call with the claim of ``task_id`` held.
    """
    if not os.path.lexists(workspace.task_dir(task_id)):
        return
    status = workspace.read_status(task_id)
    if status is not None:
        status = settle(workspace, status)
        if not status.terminal:
            raise TaskActive(task_id, status.state.value)
    elif worker_alive(workspace, task_id):  # a live worker whose status is unreadable
        raise TaskActive(task_id, TaskState.RUNNING.value)
    keep_current_run(workspace, task_id)  # copied whole before the folder goes
    remove_task_dir(workspace, task_id)


def remove_task_dir(workspace: Workspace, task_id: str) -> bool:
    """Rename the folder aside (readers never see half of it), then remove it."""
    task_dir = workspace.task_dir(task_id)
    aside = task_dir.with_name(f".removing-{secrets.token_hex(6)}-{task_dir.name}")
    try:
        os.rename(task_dir, aside)
    except FileNotFoundError:
        return False
    if aside.is_dir() and not aside.is_symlink():
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink(missing_ok=True)
    return True


def _check_replaceable_by(workspace: Workspace, task_id: str, submitted_by: Submitter) -> None:
    """A run may reuse a fixed name only over a task of its own session (or a free name)."""
    if not isinstance(submitted_by, dict) or not os.path.lexists(workspace.task_dir(task_id)):
        return
    if session_of(workspace, task_id) != submitted_by.get("session_id"):
        raise TaskNameTaken(task_id)


def _write_queued(
    workspace: Workspace,
    task_id: str,
    task: str,
    typed: TaskInput,
    submitted_by: Submitter,
    key: str | None,
    waiting_for: list[str] | None = None,
    retry: dict[str, Any] | None = None,
    cache: dict[str, Any] | None = None,
) -> TaskStatus:
    task_dir = workspace.task_dir(task_id)
    run_id = uuid.uuid4().hex
    config = typed.model_dump(mode="json")
    config["task_name"] = task_id.rsplit("#", 1)[1]
    status = TaskStatus(
        task_id=task_id, run_id=run_id, task_type=task_dir.parent.name, task_name=task,
        state=TaskState.QUEUED, config=config, created_at=utcnow(),
        log_path=os.path.abspath(workspace.run_log_path(task_id, run_id)),
        submitted_by=submitted_by, waiting_for=waiting_for or None, **(retry or {}),
        **(cache or {}),
    )
    record_submitter(workspace, task_id, run_id, submitted_by, status)
    _place(workspace, status, key)
    return status


def staging_path(workspace: Workspace, task_id: str) -> Path:
    """A new name to build the folder of ``task_id`` under, in ``<workspace>/.staging``
    (made when missing; an error when it is not a folder: a link there would move what is
    built in it elsewhere). Where the task's type folder is on another file system (a
    mount, or a link to another disk), in the type folder itself, as earlier versions
    built them: a rename cannot cross file systems."""
    area = workspace.staging_dir
    try:
        found = os.lstat(area)
    except FileNotFoundError:
        area.mkdir(exist_ok=True)
        found = os.lstat(area)
    if not stat.S_ISDIR(found.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(area))
    name = f"{STAGING_PREFIX}{secrets.token_hex(6)}-{task_id}"
    type_dir = workspace.task_dir(task_id).parent
    try:
        if os.stat(type_dir).st_dev != found.st_dev:
            return type_dir / name
    except FileNotFoundError:  # made with the task's folder, or the rename says what is wrong
        pass
    return area / name


def _place(workspace: Workspace, status: TaskStatus, key: str | None) -> None:
    """Build the folder of ``status`` under a staging name, then rename it into place."""
    task_dir = workspace.task_dir(status.task_id)
    staging = staging_path(workspace, status.task_id)
    staging.mkdir()
    try:
        append_event(staging / EVENTS_FILE, state_event(TaskState.QUEUED, status.created_at))
        if key is not None:
            # the key's answer is not synced (see IdempotencyStore.answer), so after a power
            # cut this mark is how a retry finds the task instead of making a second one;
            # the folder's fsync below makes it durable, as it does the status file's name
            mark_for_key(staging, key)
        fault_point("status")
        write_bytes_new(staging / STATUS_FILE, dump_json(status.to_json()))
        fsync_dir(staging)
        fault_point("submit.staged")
        try:
            os.rename(staging, task_dir)
        except FileNotFoundError:  # no type folder (made at start, removed since): made now
            task_dir.parent.mkdir(parents=True, exist_ok=True)
            os.rename(staging, task_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(task_dir.parent)
