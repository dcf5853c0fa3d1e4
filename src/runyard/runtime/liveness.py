"""Is a task's worker alive, and what to record when it is not.

Anyone who reads a status — the CLI, the server, the supervisor — may find a ``running``
task whose worker is gone (kill -9, a machine crash). :func:`settle` records it as
``failed`` with a clear error; no server has to be running for that::

    status = settle(workspace, workspace.read_status(task_id))
    final = wait_for_run(workspace, task_id, run_id, timeout=60)
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from runyard.errors import RunMismatch, RunyardError, TaskNotFound
from runyard.executors.base import ExitInfo
from runyard.executors.pidwatch import watching
from runyard.runtime.kubemarks import on_kubernetes
from runyard.runtime.sandboxfiles import adopt_sandbox_files
from runyard.runtime.submitters import log_to_read, server_copy
from runyard.runtime.workerlock import (
    holding_if_free,
    lock_held,
    read_owner,
    supervised,
)
from runyard.workspace.atomic import read_bytes_tolerant, write_bytes_atomic, write_json_atomic
from runyard.workspace.events import append_event
from runyard.workspace.layout import Workspace
from runyard.workspace.logs import read_log_window
from runyard.workspace.records import CANCEL_EXIT_CODE, TaskState, TaskStatus, utcnow
from runyard.workspace.space import UNWRITTEN_NOTE, is_space_error

TAIL_BYTES = 2048
CANCEL_FILE = ".cancel"
REWRITTEN = (
    "the run's status was rewritten from inside its sandbox: its end is recorded from the "
    "server's copy"
)


class RecordUnwritten(RunyardError):
    """A run's end is known but its final status could not be written (a full disk).

    ``final`` is the record still to write; ``shown`` is what to serve meanwhile: the same,
    with ``error`` saying the record could not be written yet.
    """

    def __init__(self, final: TaskStatus, cause: OSError, event_written: bool) -> None:
        self.final = final
        self.event_written = event_written
        reason = cause.strerror or str(cause)
        note = f"{UNWRITTEN_NOTE} ({reason}); it is retried until space is freed"
        error = f"{final.error}; {note}" if final.error else note[0].upper() + note[1:]
        self.shown = final.model_copy(update={"error": error})
        super().__init__(f"Final status of {final.task_id} not written: {reason}")


def worker_alive(workspace: Workspace, task_id: str) -> bool:
    """True while a worker holds ``<task_dir>/.worker.lock`` (immune to PID reuse)."""
    return lock_held(workspace.lock_path(task_id))


def settle(workspace: Workspace, status: TaskStatus) -> TaskStatus:
    """``status``, or — for a ``running`` one whose worker is gone — the ``failed`` record.

    A run watched by a live supervisor is left to it: it knows the exact exit status and
    records the end within milliseconds. So is a run on Kubernetes (its worker's lock is
    held by another node): only a server, reading its Job, can tell it ended. A tracked
    run (``status.tracked``: one MLflow's client opened) has no worker at all: its client
    ends it, and it stays running across server restarts until then.
    """
    if status.state is not TaskState.RUNNING or status.tracked is not None:
        return status
    if worker_alive(workspace, status.task_id):
        return status
    if supervised(supervision_path(workspace, status.task_id)):
        return workspace.read_status(status.task_id) or status
    if on_kubernetes(workspace, status):  # its worker is a pod: the server reads its Job
        return status
    try:
        return end_dead_run(workspace, status.task_id, status.run_id) or status
    except RecordUnwritten as exc:  # a full disk: the truth, said to be unwritten yet
        return exc.shown


def supervision_path(workspace: Workspace, task_id: str) -> Path:
    """What a supervisor of the run of ``task_id`` locks: its task folder."""
    return workspace.task_dir(task_id)


def end_dead_run(
    workspace: Workspace,
    task_id: str,
    run_id: str,
    exit_info: ExitInfo | None = None,
    *,
    cancelled: bool = False,
    error: str | None = None,
) -> TaskStatus | None:
    """Record the end of run ``run_id`` whose worker is gone; the status afterwards.

    The run becomes ``cancelled`` (exit 130) when ``cancelled``, else ``failed`` with
    ``error`` or, by default, an error saying how the worker ended and its log tail.

    Nothing is written when the run already has a final status, is not the folder's
    current run, or its worker (or another settler) still holds the lock. A full disk
    raises :class:`RecordUnwritten` carrying the final record (see :func:`write_final`).
    """
    current = workspace.read_status(task_id)
    rewritten = server_copy(workspace, task_id, run_id, current)
    if rewritten is None and (current is None or current.run_id != run_id or current.terminal):
        return current  # the usual end (the worker wrote it): final, so no lock to take
    with holding_if_free(workspace.lock_path(task_id)) as free:
        current = workspace.read_status(task_id)
        rewritten = server_copy(workspace, task_id, run_id, current)
        if rewritten is not None:  # a sandboxed task replaced its status: the server's copy
            current, error = rewritten, error or REWRITTEN
        elif not free or current is None or current.run_id != run_id or current.terminal:
            return current
        cancelled = cancelled or cancel_requested(workspace, task_id, run_id)
        adopt_sandbox_files(workspace.task_dir(task_id))  # its keeper could not: gone first
        if error is None and not cancelled:  # the real log's tail, never a path the task wrote
            error = _death_message(current, exit_info, log_to_read(workspace, current))
        error = error or ""
        final = _final_status(current, exit_info, cancelled, error)
        _record_final(workspace, final, with_event=True)
        return final


def write_final(workspace: Workspace, held: RecordUnwritten) -> None:
    """Write the record ``held`` kept if its run is still the folder's unfinished current
    run; raises :class:`RecordUnwritten` again while the disk is still full."""
    final = held.final
    with holding_if_free(workspace.lock_path(final.task_id)) as free:
        current = workspace.read_status(final.task_id)
        same_run = current is not None and current.run_id == final.run_id
        unfinished = free and same_run and current is not None and not current.terminal
        rewritten = server_copy(workspace, final.task_id, final.run_id, current) is not None
        if unfinished or rewritten:
            _record_final(workspace, final, with_event=not held.event_written)


def _record_final(workspace: Workspace, final: TaskStatus, *, with_event: bool) -> None:
    """The state event, then the status (streams read the event before they see the end)."""
    event_written = not with_event
    try:
        if with_event:
            event = state_event(final.state, final.finished_at)
            append_event(workspace.events_path(final.task_id), event)
            event_written = True
        workspace.write_status(final, durable=True)
    except OSError as exc:
        if is_space_error(exc):
            raise RecordUnwritten(final, exc, event_written) from exc
        raise


def record_limits(
    workspace: Workspace, task_id: str, run_id: str, report: dict[str, Any] | None
) -> None:
    """Keep in the ``queued`` status of run ``run_id`` what will limit it and how (its
    worker carries the record on into every later status); None (no limits) keeps none."""
    if report is None:
        return
    with holding_if_free(workspace.lock_path(task_id)) as free:
        current = workspace.read_status(task_id)
        if free and current is not None and current.run_id == run_id and not current.terminal:
            updated = current.model_copy(update={"limits": report})
            # not fsynced: on the launch path, and a crash that lost it loses no run
            write_json_atomic(workspace.status_path(task_id), updated.to_json(), fsync=False)


def request_cancel(workspace: Workspace, task_id: str, run_id: str) -> None:
    """Note on disk that run ``run_id`` is being cancelled, so whoever settles its end
    (the supervisor, or any reader) records ``cancelled`` rather than ``failed``."""
    with contextlib.suppress(OSError):  # a folder removed meanwhile has nothing to settle
        write_bytes_atomic(workspace.task_dir(task_id) / CANCEL_FILE, run_id.encode(), fsync=False)


def cancel_requested(workspace: Workspace, task_id: str, run_id: str) -> bool:
    return read_bytes_tolerant(workspace.task_dir(task_id) / CANCEL_FILE) == run_id.encode()


def state_event(state: TaskState, at: str | None) -> dict[str, str | None]:
    return {"kind": "state", "state": state.value, "at": at}


def _final_status(
    current: TaskStatus, exit_info: ExitInfo | None, cancelled: bool, error: str
) -> TaskStatus:
    now = utcnow()
    if cancelled:  # a reason it was still queued is no longer true of it
        return current.model_copy(
            update={"state": TaskState.CANCELLED, "finished_at": now,
                    "exit_code": CANCEL_EXIT_CODE, "error": "Cancelled", "queued_reason": None,
                    "waiting_for": None}
        )
    return current.model_copy(
        update={"state": TaskState.FAILED, "finished_at": now,
                "exit_code": _exit_code(exit_info), "error": error, "queued_reason": None,
                "waiting_for": None}
    )


def _death_message(current: TaskStatus, exit_info: ExitInfo | None, log_path: str) -> str:
    how = exit_info.describe() if exit_info is not None else "exit status unknown"
    when = "before it started" if current.state is TaskState.QUEUED else "without a final status"
    message = f"Worker ended {when} ({how})"
    tail = log_tail(log_path)
    return f"{message}; log tail:\n{tail}" if tail else message


def _exit_code(exit_info: ExitInfo | None) -> int:
    if exit_info is None:
        return 1
    if exit_info.signal is not None:
        return 128 + exit_info.signal
    return exit_info.exit_code or 1


def log_tail(log_path: str, limit: int = TAIL_BYTES) -> str:
    """The last lines of a log (at most ``limit`` bytes), or "" when there is none."""
    if not log_path:
        return ""
    content = read_log_window(log_path, -1, limit).content
    if len(content.encode()) >= limit and "\n" in content:
        content = content.split("\n", 1)[1]
    return content.strip()


def wait_for_run(
    workspace: Workspace,
    task_id: str,
    run_id: str,
    poll_interval: float = 1.0,
    timeout: float | None = None,
) -> TaskStatus:
    """Block until run ``run_id`` of ``task_id`` is final; on timeout, its current status.

    Waits on the worker's pidfd while it runs, so the end is seen at once; re-reads the
    status at least every ``poll_interval`` seconds. Raises :class:`TaskNotFound` when
    there is no status and :class:`RunMismatch` when the folder holds another run.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = 0.002
    while True:
        status = workspace.read_status(task_id)
        if status is None:
            raise TaskNotFound(task_id)
        if status.run_id != run_id:
            raise RunMismatch(task_id, run_id, status.run_id)
        status = settle(workspace, status)
        left = None if deadline is None else deadline - time.monotonic()
        if status.terminal or (left is not None and left <= 0):
            return status
        wait = poll_interval if left is None else min(poll_interval, left)
        if _wait_worker_exit(workspace, task_id, wait):
            pause = 0.002  # its end is recorded within moments: look again soon
        else:
            time.sleep(min(pause, wait))
            pause = min(pause * 2, poll_interval)


def _wait_worker_exit(workspace: Workspace, task_id: str, timeout: float) -> bool:
    """Wait for the live worker to exit; False when there is no worker to wait on."""
    lock = workspace.lock_path(task_id)
    owner = read_owner(lock)
    if owner is None or not lock_held(lock):
        return False
    with watching(owner.pid, owner.start_time) as worker:
        if worker is None:
            return False
        worker.wait(timeout)
    return True
