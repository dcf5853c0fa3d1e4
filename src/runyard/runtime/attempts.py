"""Which run of a task an attempt is, told from its status alone (no files read): whether a
retry follows a failed run, and whether a status is a run or a later attempt of it. See
:mod:`runyard.runtime.retries` for the retries themselves."""

from __future__ import annotations

from runyard.workspace.records import TaskState, TaskStatus

# the error of a task that never ran because an upstream did not succeed (never retried)
UPSTREAM_FAILED = "upstream failed: "


def retry_due(status: TaskStatus) -> bool:
    """Whether ``status`` is a failed attempt with attempts left (a retry follows it)."""
    attempt, retries = status.attempt, status.retries
    return (
        status.state is TaskState.FAILED
        and attempt is not None
        and retries is not None
        and attempt <= retries
        and not status.error.startswith(UPSTREAM_FAILED)
    )


def follows(status: TaskStatus, run_id: str) -> bool:
    """Whether ``status`` is run ``run_id`` or a retry of it (a wait on the first attempt's
    handle follows the task to its last attempt)."""
    return status.run_id == run_id or (status.retry_of is not None and status.retry_of == run_id)
