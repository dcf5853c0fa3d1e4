"""Ends of agent runs a full disk kept from the store: held in memory, served, retried.

    held = HeldSettles(write, written)
    held.hold(run_id, end)      # the store refused the final state (a full disk)
    held.shown(run)             # the run as served: its held end laid over it
    held.stop()                 # retries end; the next server settles it from its exit file

A run whose process is gone must not stay ``running`` because one write failed. Its end is
kept here and written again with backoff (0.2 s doubling up to 5 s) until the store takes it;
meanwhile readers see it ended. ``write(run_id, end)`` raises while the disk is still full
(or the store fails otherwise: :func:`retryable`); ``written(run_id)`` is called once it went
through (queued runs of its session may start).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from runyard.agents.models import HistoryEntry, Run
from runyard.errors import RunyardError
from runyard.wire import TaskState
from runyard.workspace.space import is_space_error

__all__ = ["HeldSettles", "RunEnd"]

log = logging.getLogger("runyard.agents")
RETRY_SECONDS = 0.2
RETRY_MAX_SECONDS = 5.0


def retryable(exc: BaseException) -> bool:
    """A failure of the store itself (a full disk above all), not one of runyard's own
    answers (the run is gone, say): writing the same end again may succeed."""
    return is_space_error(exc) or not isinstance(exc, RunyardError)


@dataclass(frozen=True)
class RunEnd:
    """The final record of a run, as :meth:`AgentStore.finish_run` takes it."""

    state: TaskState
    finished_at: str
    exit_code: int | None
    error: str
    answer: HistoryEntry | None


class HeldSettles:
    """Run ends not yet in the store, by run id."""

    def __init__(
        self, write: Callable[[str, RunEnd], object], written: Callable[[str], None]
    ) -> None:
        self._write = write
        self._written = written
        self._lock = threading.Lock()
        self._held: dict[str, RunEnd] = {}
        self._timers: dict[str, threading.Timer] = {}
        self._stopped = False

    def holds(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._held

    def hold(self, run_id: str, end: RunEnd) -> None:
        with self._lock:
            self._held[run_id] = end
        self._retry_later(run_id, 0)

    def shown(self, run: Run) -> Run:
        """``run`` with its held end, if one is held (else ``run`` itself)."""
        with self._lock:
            end = self._held.get(run.id)
        if end is None:
            return run
        return replace(
            run, state=end.state, finished_at=end.finished_at, exit_code=end.exit_code,
            error=end.error,
        )  # fmt: skip

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            timers = list(self._timers.values())
            self._timers.clear()
        for timer in timers:
            timer.cancel()

    def _retry_later(self, run_id: str, attempt: int) -> None:
        delay = min(RETRY_MAX_SECONDS, RETRY_SECONDS * 2**attempt)
        timer = threading.Timer(delay, self._retry, args=(run_id, attempt + 1))
        timer.name = f"settle-retry-{run_id}"
        timer.daemon = True
        with self._lock:
            if self._stopped:
                return
            self._timers[run_id] = timer
        timer.start()

    def _retry(self, run_id: str, attempt: int) -> None:
        with self._lock:
            end = self._held.get(run_id)
        if end is None:
            return
        try:
            self._write(run_id, end)
        except Exception as exc:
            if retryable(exc):
                log.warning("Cannot record the end of run %s yet: %s", run_id, exc)
                self._retry_later(run_id, attempt)
                return
            log.exception("Recording the end of run %s failed; it is no longer retried", run_id)
        else:
            log.warning("Recorded the end of run %s now that the store took it", run_id)
        with self._lock:
            self._held.pop(run_id, None)
            self._timers.pop(run_id, None)
        self._written(run_id)
