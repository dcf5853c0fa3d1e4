"""Ends of runs a full disk kept from their status files: held in memory, served, retried.

    held = HeldEnds(workspace, lock, changed, monitor)
    final = held.end(task_id, run_id, exit_info)   # end_dead_run, or held when the disk is full
    held.shown(task_id)                            # the held final status, as served

A held end is written with backoff (from the supervisor's monitor thread) until space is
freed; meanwhile the task reads as ended, cannot be cancelled, and can be deleted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from runyard.executors.base import ExitInfo
from runyard.executors.pidwatch import ExitMonitor
from runyard.runtime.creation import claim, remove_task_dir
from runyard.runtime.liveness import RecordUnwritten, end_dead_run, write_final
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskStatus

log = logging.getLogger("runyard.runtime.supervisor")
RETRY_SECONDS = 0.2
RETRY_MAX_SECONDS = 5.0


class HeldEnds:
    """Final statuses not yet on disk, by task id (guarded by the supervisor's lock)."""

    def __init__(
        self,
        workspace: Workspace,
        lock: threading.RLock,
        changed: Callable[[str], None],
        monitor: Callable[[], ExitMonitor | None],
    ) -> None:
        self.workspace = workspace
        self._lock = lock
        self._changed = changed
        self._monitor = monitor
        self._held: dict[str, RecordUnwritten] = {}

    def holds(self, task_id: str) -> bool:
        with self._lock:
            return task_id in self._held

    def shown(self, task_id: str) -> TaskStatus | None:
        """The final status of ``task_id`` a full disk keeps from its file, as served."""
        held = self._held.get(task_id)
        return held.shown if held is not None else None

    def count(self) -> int:
        return len(self._held)

    def discard(self, task_id: str) -> None:
        """A new run of the task replaces its held end."""
        with self._lock:
            self._held.pop(task_id, None)

    def delete(self, task_id: str) -> bool:
        """Delete a task whose end only memory holds (it is final: deletable)."""
        with claim(self.workspace, task_id), self._lock:
            if self._held.pop(task_id, None) is None:
                return False
            return remove_task_dir(self.workspace, task_id)

    def end(
        self,
        task_id: str,
        run_id: str,
        exit_info: ExitInfo | None = None,
        *,
        cancelled: bool = False,
        error: str | None = None,
    ) -> TaskStatus | None:
        """:func:`end_dead_run`; on a full disk the end is held in memory (served, and
        retried with backoff) and returned as it is served."""
        try:
            return end_dead_run(
                self.workspace, task_id, run_id, exit_info, cancelled=cancelled, error=error
            )
        except RecordUnwritten as held:
            log.warning("Cannot record the end of %s yet: %s", task_id, held.__cause__)
            with self._lock:
                self._held[task_id] = held
            self._changed(task_id)
            self._retry_later(task_id, 0)
            return held.shown

    def _retry_later(self, task_id: str, attempt: int) -> None:
        delay = min(RETRY_MAX_SECONDS, RETRY_SECONDS * 2**attempt)
        monitor = self._monitor()
        if monitor is not None:
            monitor.call_later(delay, lambda: self._write(task_id, attempt + 1))

    def _write(self, task_id: str, attempt: int) -> None:
        with self._lock:
            held = self._held.get(task_id)
        if held is None:
            return
        try:
            with claim(self.workspace, task_id):
                write_final(self.workspace, held)
        except RecordUnwritten as again:
            with self._lock:
                if self._held.get(task_id) is held:
                    self._held[task_id] = again
            self._retry_later(task_id, attempt)
            return
        except FileNotFoundError:
            pass  # the folder is gone: nothing left to record
        with self._lock:
            if self._held.get(task_id) is held:
                del self._held[task_id]
        log.warning("Recorded the end of %s now that space was freed", task_id)
        self._changed(task_id)
