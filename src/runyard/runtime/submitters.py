"""Who submitted a task, kept where the task itself cannot write.

A task submitted with a run token runs sandboxed, and its own folder is writable from
inside that sandbox: its ``status.json`` (``submitted_by``, ``log_path``, ``run_id``) and
its ``.worker.lock`` may say anything by the time the server reads them again. So the
server also records the submitter beside the workspace's type folders::

    <workspace>/.submitters/<task_type>/<task_id>.json
        {"task_id": ..., "run_id": ..., "submitted_by": {"session_id": ..., "run_id": ...},
         "pid": <sandbox process on the host>, "start_time": <its start time>}

Decisions that matter trust this record over the status: a task is launched sandboxed if
either says so (so a rewritten status cannot make it an admin task), its log is the log
of the recorded run (so a rewritten ``log_path`` cannot name a host file), and it is
visible to a session only when this record names that session. Admin-submitted tasks have
no record; replacing a task by an admin submit removes it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from runyard.workspace.atomic import read_json_tolerant, write_json_atomic
from runyard.workspace.identity import is_run_id, parse_task_id
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskState, TaskStatus, status_from_dict

ADMIN = "admin"
SUBMITTERS_DIR = ".submitters"

Submitter = str | dict[str, str]


def run_submitter(session_id: str, run_id: str) -> dict[str, str]:
    """The ``submitted_by`` of a task submitted with the token of agent run ``run_id``."""
    return {"session_id": session_id, "run_id": run_id}


def submitter_path(workspace: Workspace, task_id: str) -> Path:
    tid = parse_task_id(task_id)
    return workspace.root / SUBMITTERS_DIR / tid.task_type / f"{tid}.json"


def record_submitter(
    workspace: Workspace,
    task_id: str,
    run_id: str,
    submitted_by: Submitter,
    queued: TaskStatus | None = None,
) -> None:
    """Record who submitted run ``run_id`` (call under the task's claim, before its status),
    with the server's copy of its ``queued`` status: what its end is recorded from when the
    task rewrote its own status (see :func:`server_copy`)."""
    path = submitter_path(workspace, task_id)
    if not isinstance(submitted_by, dict):
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "task_id": task_id, "run_id": run_id, "submitted_by": dict(submitted_by),
    }  # fmt: skip
    if queued is not None:
        record["queued"] = queued.to_json()
    write_json_atomic(path, record, sync_dir=True)


def server_copy(
    workspace: Workspace, task_id: str, run_id: str, current: TaskStatus | None
) -> TaskStatus | None:
    """The server's copy of run ``run_id`` of a run-submitted task when the status in its
    folder is not that run's any more (rewritten by the task, made unreadable, given
    another run id); None when the status is the run's own, or the task is an admin's."""
    if current is not None and current.run_id == run_id:
        return None
    record = read_submitter(workspace, task_id)
    if record is None or record["run_id"] != run_id:
        return None
    return status_from_dict(record.get("queued"), task_id)


def read_submitter(workspace: Workspace, task_id: str) -> dict[str, Any] | None:
    """The record of a run-submitted task (None for admin tasks and unreadable records)."""
    data = read_json_tolerant(submitter_path(workspace, task_id))
    if not isinstance(data, dict) or data.get("task_id") != task_id:
        return None
    by = data.get("submitted_by")
    if not isinstance(by, dict) or not isinstance(by.get("session_id"), str):
        return None
    if not isinstance(data.get("run_id"), str) or not is_run_id(data["run_id"]):
        return None
    return data


def forget_submitter(workspace: Workspace, task_id: str) -> None:
    submitter_path(workspace, task_id).unlink(missing_ok=True)


def record_sandbox_process(
    workspace: Workspace, task_id: str, pid: int, start_time: int | None
) -> None:
    """Note the host process of a sandboxed worker: the one a later server may signal.

    The lock file in the task folder names a PID inside the sandbox's PID namespace (and
    the task could rewrite it), so cancel and adoption of sandboxed tasks use this.
    """
    record = read_submitter(workspace, task_id)
    if record is None:
        return
    record.update(pid=pid, start_time=start_time)
    write_json_atomic(submitter_path(workspace, task_id), record)


def sandbox_process(workspace: Workspace, task_id: str) -> tuple[int, int | None] | None:
    record = read_submitter(workspace, task_id)
    if record is None or not isinstance(record.get("pid"), int) or record["pid"] <= 1:
        return None
    start = record.get("start_time")
    return record["pid"], start if isinstance(start, int) else None


def launch_scope(workspace: Workspace, status: TaskStatus) -> dict[str, str] | None:
    """The submitter a task's worker must be sandboxed for; None for an admin task.

    Either record is enough to sandbox it: the status could have been rewritten by the
    task, the server's own record could be gone while an old status still says so.
    """
    record = read_submitter(workspace, status.task_id)
    if record is not None:
        return dict(record["submitted_by"])
    if isinstance(status.submitted_by, dict):
        return dict(status.submitted_by)
    return None


def slot_owner(submitted_by: Submitter | None) -> str | None:
    """Whose share of the task slots a task takes: the session of the run that submitted
    it (one share for all of its runs), None for an admin task."""
    if not isinstance(submitted_by, dict):
        return None
    return str(submitted_by.get("session_id", ""))


def session_of(workspace: Workspace, task_id: str) -> str | None:
    """The session that submitted ``task_id`` according to the server's record."""
    record = read_submitter(workspace, task_id)
    return None if record is None else str(record["submitted_by"]["session_id"])


Record = dict[str, Any] | None
UNREAD: Any = object()  # a ``record`` argument not given: the function reads it


def own_status(
    workspace: Workspace, task_id: str, status: TaskStatus | None, record: Record = UNREAD
) -> TaskStatus | None:
    """``status`` as readers may take it: for a run-submitted task whose folder holds a status
    that is not its recorded run's (the task rewrote it), the server's copy of that run,
    ``running`` once launched, until its end is recorded; anything else as it is.
    ``record`` is the task's :func:`read_submitter` where the caller has it already."""
    if record is UNREAD:
        record = read_submitter(workspace, task_id)
    if record is None or (status is not None and status.run_id == record["run_id"]):
        return status
    kept = status_from_dict(record.get("queued"), task_id)
    if kept is None or kept.run_id != record["run_id"]:
        return status
    if isinstance(record.get("pid"), int):
        return kept.model_copy(update={"state": TaskState.RUNNING})
    return kept


def trusted_log_path(workspace: Workspace, status: TaskStatus, record: Record = UNREAD) -> str:
    """The log path to tell of ``status``: the log of its run, derived from validated ids.

    The log of a run is ``<log_dir>/<task_type>/<task_id>/<run_id>.log``; for a
    run-submitted task the run is the recorded one, never one a status the task could have
    rewritten names. An admin task whose derived log does not exist (a status written by
    another tool) is told as its status says; what is *opened* is :func:`log_to_read`.
    """
    derived, sandboxed = _derived_log(workspace, status, record)
    if sandboxed or status.log_path == derived or os.path.lexists(derived):
        return derived
    return status.log_path


def log_to_read(workspace: Workspace, status: TaskStatus, record: Record = UNREAD) -> str:
    """The log file a reader opens for ``status``: the derived one, or — for an admin task
    of another tool whose derived log does not exist — the one its status names when it
    lies inside the log folder. Never a path outside it that a record names."""
    derived, sandboxed = _derived_log(workspace, status, record)
    if sandboxed or status.log_path in ("", derived) or os.path.lexists(derived):
        return derived
    return status.log_path if _inside(workspace.log_dir, status.log_path) else derived


def _derived_log(workspace: Workspace, status: TaskStatus, record: Record) -> tuple[str, bool]:
    if record is UNREAD:
        record = read_submitter(workspace, status.task_id)
    sandboxed = record is not None or isinstance(status.submitted_by, dict)
    run_id = record["run_id"] if record is not None else status.run_id
    return os.path.abspath(workspace.run_log_path(status.task_id, run_id)), sandboxed


def _inside(folder: Path, path: str) -> bool:
    """Whether ``path`` resolves to a file below ``folder`` (symlinks resolved first)."""
    real_folder = os.path.realpath(folder)
    return os.path.realpath(path).startswith(real_folder.rstrip(os.sep) + os.sep)
