"""When the worker writes a run's metrics and params, and its intake of other processes'.

:class:`RunMetrics` puts a :class:`~runyard.tracking.recorder.MetricRecorder` (the points
and params) and a :class:`~runyard.tracking.intake.MetricsIntake` (``$RUNYARD_METRICS_FILE``)
on a schedule. Points are written to ``metrics.jsonl``:

* at once when :data:`~runyard.tracking.recorder.FLUSH_POINTS` wait;
* else :data:`FLUSH_SECONDS` after the first that waits (a timer thread: the ``timer``
  collaborator, :class:`~runyard.runtime.taskrun.HeldWrite` in the worker);
* and always at a step's end and at the run's end (:meth:`RunMetrics.close`), whatever the
  end: success, failure or cancel.

Each write hands the new summary and params to ``publish``, which puts them in the status
(whose writes are throttled already). A task that logs nothing pays for one idle thread,
the intake's, which looks at the input file every :data:`POLL_SECONDS`.

A task that forks (``multiprocessing``) leaves its child a recorder without the parent's
waiting points (the parent writes those), with fresh locks and no timer or intake thread.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from runyard.tracking.intake import MetricsIntake
from runyard.tracking.points import METRICS_ENV, METRICS_IN_FILE, LoggedLine
from runyard.tracking.recorder import FLUSH_POINTS, MetricRecorder

FLUSH_SECONDS = 0.25
POLL_SECONDS = 0.5
STOP_TIMEOUT = 5.0
Publish = Callable[[dict[str, dict[str, Any]], dict[str, Any]], None]
_ALL: weakref.WeakSet[RunMetrics] = weakref.WeakSet()


class RunMetrics:
    """The tracking of one run in its worker (see the module's text).

    ``timer(delay, action)`` calls ``action(handle)`` after ``delay`` seconds on a thread
    unless ``handle.cancel()`` comes first; ``deferred()`` holds a cancel back while a
    write is under way (the worker's :meth:`CancelSignal.deferred`); ``say`` writes a line
    to the run's log.
    """

    def __init__(
        self,
        task_dir: Path,
        publish: Publish,
        timer: Callable[[float, Callable[[Any], None]], Any],
        deferred: Callable[[], AbstractContextManager[None]] = nullcontext,
        say: Callable[[str], None] = print,
    ) -> None:
        self.recorder = MetricRecorder(task_dir)
        self.input_path = task_dir / METRICS_IN_FILE
        self.intake = MetricsIntake(self.input_path, self._take_line, say)
        self._publish = publish
        self._new_timer = timer
        self._deferred = deferred
        self._timer: Any = None
        self._watcher: _Watcher | None = None
        self._env_before: str | None = None
        self._closed = False
        # a summary is taken and published under this lock, and none after the last: a
        # timer's older summary never lands over the run's final one
        self._publishing = threading.Lock()
        _ALL.add(self)

    def start(self) -> None:
        """Name the input file to every process the task starts, and watch it. One left
        by an earlier run in the folder (a retry's) is removed first: its lines were that
        run's, recorded in its metrics already."""
        with contextlib.suppress(OSError):
            os.unlink(self.input_path)
        self._env_before = os.environ.get(METRICS_ENV)
        os.environ[METRICS_ENV] = str(self.input_path)
        self._watcher = _Watcher(POLL_SECONDS, self._poll)

    def log(self, name: str, value: object, step: int | None = None) -> None:
        if self.recorder.log(name, value, step) >= FLUSH_POINTS or self._timer is None:
            self._after_log(FLUSH_POINTS if self.recorder.pending >= FLUSH_POINTS else 1)

    def log_many(self, values: Mapping[str, object], step: int | None = None) -> None:
        self._after_log(self.recorder.log_many(values, step))

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.recorder.log_params(params)
        self._after_log(self.recorder.pending or 1)

    def _after_log(self, waiting: int) -> None:
        if self._closed:
            return  # a late report (from a thread of the task): the final summary is out
        if waiting >= FLUSH_POINTS:
            self.flush()
        elif self._timer is None:
            self._timer = self._new_timer(FLUSH_SECONDS, self._flush_held)

    def flush(self) -> None:
        """Write what waits now (a cancel waits until it is written) and publish."""
        self._drop_timer()
        with self._deferred():
            self._flush_quietly()

    def close(self) -> None:
        """At the run's end: the intake stopped and read to its end, everything written
        durably, the last summary published. Later logs are written by nobody."""
        if self._watcher is not None:
            self._watcher.stop(STOP_TIMEOUT)
            self._watcher = None
            self._restore_env()
        self.intake.poll(final=True)
        self._drop_timer()
        with self._publishing:
            self._closed = True
            try:
                self.recorder.flush(durable=True)
            except OSError as exc:  # a full disk: the run still ends, its points are lost
                print(f"runyard worker: metrics not written: {exc}", file=sys.stderr,
                      flush=True)
            self._publish(self.recorder.summary(), self.recorder.params())

    def _take_line(self, line: LoggedLine) -> None:
        waiting = self.recorder.log(line.name, line.value, line.step, line.time)
        if waiting >= FLUSH_POINTS:
            self._flush_quietly()

    def _poll(self) -> None:
        if self.intake.poll():
            self._flush_quietly()

    def _flush_held(self, timer: Any) -> None:
        if self._timer is not timer or self._closed:
            return
        self._timer = None
        self._flush_quietly()

    def _flush_quietly(self) -> None:
        """Write and publish; a failure (a full disk) is a line of the worker's stderr, not
        the task's failure: the points stay lost, the run goes on."""
        try:
            wrote = self.recorder.flush()
            with self._publishing:
                if (wrote or self.recorder.changed) and not self._closed:
                    self._publish(self.recorder.summary(), self.recorder.params())
        except OSError as exc:
            print(f"runyard worker: metrics not written: {exc}", file=sys.stderr, flush=True)

    def _drop_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _restore_env(self) -> None:
        if self._env_before is None:
            os.environ.pop(METRICS_ENV, None)
        else:
            os.environ[METRICS_ENV] = self._env_before

    def _after_fork_in_child(self) -> None:
        self.recorder.drop_pending()
        self.recorder.reset_lock()
        self.intake.reset_lock()
        self._publishing = threading.Lock()
        self._timer = None
        self._watcher = None  # its thread is the parent's


class _Watcher:
    """Calls ``action()`` every ``every`` seconds on a bare thread until :meth:`stop`."""

    def __init__(self, every: float, action: Callable[[], None]) -> None:
        self._stop = _thread.allocate_lock()
        self._stop.acquire()
        self._done = _thread.allocate_lock()
        self._done.acquire()
        _thread.start_new_thread(self._run, (every, action))

    def _run(self, every: float, action: Callable[[], None]) -> None:
        try:
            while not self._stop.acquire(timeout=every):
                try:
                    action()
                except Exception as exc:  # the task goes on; its metrics wait for the end
                    print(f"runyard worker: metrics intake: {exc!r}", file=sys.stderr,
                          flush=True)
        finally:
            self._done.release()

    def stop(self, timeout: float) -> bool:
        """End the thread; whether it ended within ``timeout`` seconds."""
        self._stop.release()
        if not self._done.acquire(timeout=timeout):
            return False
        self._done.release()
        return True


def _after_fork_in_child() -> None:
    for metrics in list(_ALL):
        metrics._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
