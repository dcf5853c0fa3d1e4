"""Queued work waits for disk space instead of being launched to fail.

While less than ``min_free_mb`` is free under the workspace, the supervisor launches no
queued run: a worker launched then would fail at its first record write, having run
nothing. Each waiting run stays ``queued``, and its status says why in ``queued_reason``
(``"waiting for disk space: 3 MB free, min_free_mb 64"``; written once per shortage, and
taken out again before the run launches or when space returns); the supervisor looks
again every :data:`RECHECK_SECONDS` and launches as soon as there is room.
``min_free_mb: 0`` turns the wait off, as it turns off the 507 of new work.

>>> wait = SpaceWait(workspace, settings.min_free_mb)
>>> wait.holds(queue.entries)       # True while short of space: launch nothing now
>>> wait.launching(status)          # the status to launch, without a stale reason
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from runyard.runtime.workerlock import holding_if_free
from runyard.workspace.atomic import write_json_atomic
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskState, TaskStatus
from runyard.workspace.space import is_space_error, space_shortage

log = logging.getLogger(__name__)

RECHECK_SECONDS = 2.0


class SpaceWait:
    """The queue's wait for space; not thread-safe (the supervisor's lock)."""

    def __init__(self, workspace: Workspace, min_free_mb: int) -> None:
        self.workspace = workspace
        self.min_free_mb = min_free_mb
        self._noted: dict[str, str] = {}  # task id -> run id whose status names the wait

    def holds(self, queued: Callable[[], Iterable[tuple[str, str]]]) -> bool:
        """True while short of space: every ``(task_id, run_id)`` ``queued()`` gives says so
        in its status. False once there is room, the reasons written meanwhile taken out."""
        reason = space_shortage(self.workspace.root, self.min_free_mb)
        if reason is None:
            if self._noted:
                log.info("disk space is back: %d queued runs launch again", len(self._noted))
                for task_id, run_id in self._noted.items():
                    write_queued_reason(self.workspace, task_id, run_id, None)
                self._noted.clear()
            return False
        for task_id, run_id in queued():
            if self._noted.get(task_id) != run_id:
                if not self._noted:
                    log.warning("queued runs wait: %s", reason)
                self._noted[task_id] = run_id
                write_queued_reason(self.workspace, task_id, run_id, reason)
        return True

    def launching(self, status: TaskStatus) -> TaskStatus:
        """``status`` as its run is launched: a reason left in it (by a wait, or by a server
        stopped while waiting) taken out first, so the worker does not carry it on."""
        self._noted.pop(status.task_id, None)
        if status.queued_reason is None:
            return status
        write_queued_reason(self.workspace, status.task_id, status.run_id, None)
        return status.model_copy(update={"queued_reason": None})


def write_queued_reason(
    workspace: Workspace, task_id: str, run_id: str, reason: str | None
) -> None:
    """Put ``reason`` in (None: take it out of) the ``queued`` status of run ``run_id``;
    nothing when the task moved on, or when the full disk refuses even this."""
    with holding_if_free(workspace.lock_path(task_id)) as free:
        current = workspace.read_status(task_id)
        if not free or current is None or current.run_id != run_id:
            return
        if current.state is not TaskState.QUEUED:
            return
        if current.queued_reason == reason:
            return
        updated = current.model_copy(update={"queued_reason": reason})
        try:  # not fsynced: a reason a crash loses is written again by the next wait
            write_json_atomic(workspace.status_path(task_id), updated.to_json(), fsync=False)
        except OSError as exc:
            if not is_space_error(exc):
                raise
