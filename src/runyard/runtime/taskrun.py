"""The :class:`TaskRun` a task body sees inside the worker, and the cancel signal it obeys.

Every progress change is appended to ``events.jsonl`` before the matching status write,
so a stream replayed from the journal never lags the snapshot. Progress status writes
skip fsync (a crash may lose them); state changes are written durably by the worker.

Progress reaches ``status.json`` at most once every :data:`PROGRESS_WRITE_INTERVAL`: a
change that comes sooner after the last write is written when the interval ends (by a
timer thread), together with any that follow it, unless a state change writes the whole
status first. A task that reports progress in a tight loop thus writes status.json at
most twenty times a second, not once a call (each write is a new file renamed over the
last), and its journal still holds every change.

The timer is a bare thread (:class:`HeldWrite`), not a ``threading.Timer``: nearly every
short run starts one and drops it, and the threading module's machinery costs a forked
worker about 0.3 ms of CPU and 60 page faults more.

A task may fork (``multiprocessing`` does on Linux) while the timer thread holds the run's
lock or waits to write: the child gets a fresh lock and no timer, so its own reports go
on (a lock held by a thread the child does not have would block them for ever, and a
timer the child does not run would hold their write back for ever).
"""

from __future__ import annotations

import _signal
import _thread
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any

from runyard.runtime.liveness import state_event
from runyard.runtime.recordsink import FolderRecords, Records
from runyard.runtime.runmetrics import RunMetrics
from runyard.tasks.base import ArtifactRef, TaskRun
from runyard.workspace.artifacts import artifact_record
from runyard.workspace.layout import Workspace
from runyard.workspace.records import Step, TaskState, TaskStatus, utcnow

PROGRESS_WRITE_INTERVAL = 0.05  # seconds between two progress writes of status.json
_RUNS: weakref.WeakSet[WorkerRun] = weakref.WeakSet()  # this process's runs, for a fork
_PENDING: set[HeldWrite] = set()  # this process's timers whose thread has not ended


class HeldWrite:
    """Call ``action(self)`` on a thread of its own after ``delay`` seconds, unless
    :meth:`cancel` comes first. A bare ``_thread`` (with the threading module, every
    short run would pay for a Thread, an Event and a Condition); :func:`join_held_writes`
    waits for every one of them."""

    def __init__(self, delay: float, action: Any) -> None:
        self._stop = _thread.allocate_lock()
        self._stop.acquire()
        self._done = _thread.allocate_lock()
        self._done.acquire()
        _PENDING.add(self)
        try:
            _thread.start_new_thread(self._run, (delay, action))
        except BaseException:
            _PENDING.discard(self)
            raise

    def _run(self, delay: float, action: Any) -> None:
        try:
            if not self._stop.acquire(timeout=delay):
                action(self)
        finally:
            _PENDING.discard(self)
            self._done.release()

    def cancel(self) -> None:
        """Wake the thread and end it without the call (a no-op once cancelled)."""
        with suppress(RuntimeError):  # released already
            self._stop.release()

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the thread to end; whether it did."""
        if not self._done.acquire(timeout=max(0.0, timeout)):
            return False
        self._done.release()
        return True


def join_held_writes(timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for every timer thread of this process to end
    (before a fork, say); whether they all did."""
    deadline = time.monotonic() + timeout
    return all(held.join(deadline - time.monotonic()) for held in list(_PENDING))


class TaskCancelled(BaseException):
    """Raised inside the task body on SIGTERM (a BaseException, so ``except Exception``
    in task code does not swallow it)."""


class CancelSignal:
    """SIGTERM/SIGINT handling: raise :class:`TaskCancelled` while armed, else set a flag.

    Raising is the only way to stop arbitrary task code blocked in a call (it is how
    Python delivers KeyboardInterrupt); it is armed only while the task body runs and
    deferred around record writes, so a cancel never leaves a record half-updated.
    """

    def __init__(self) -> None:
        self.requested = False
        self._armed = False

    def install(self) -> None:
        # the C function under signal.signal: its wrapper turns the handler it replaces into
        # an enum member, by a failed lookup for a function (the launcher's SIGINT one); in
        # a forked worker that cost 36 page faults and 0.13 ms of its CPU
        _signal.signal(signal.SIGTERM, self._handle)
        _signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        if self._armed:
            self._armed = False
            raise TaskCancelled

    @contextmanager
    def armed(self) -> Iterator[None]:
        """Let a cancel interrupt the body running inside this block."""
        self._armed = True
        try:
            if self.requested:
                raise TaskCancelled
            yield
        finally:
            self._armed = False

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold a cancel back while a record is written; raise it afterwards."""
        was_armed, self._armed = self._armed, False
        try:
            yield
        finally:
            self._armed = was_armed
        if was_armed and self.requested:
            self._armed = False
            raise TaskCancelled


class WorkerRun(TaskRun):
    """Progress, steps, artifacts and log of the run in this worker process."""

    def __init__(
        self,
        workspace: Workspace,
        status: TaskStatus,
        cancel: CancelSignal,
        records: Records | None = None,
    ) -> None:
        self.workspace = workspace
        self.records = records or FolderRecords(workspace, status.task_id)
        self.task_id = status.task_id
        self.run_id = status.run_id
        self.task_dir = workspace.task_dir(status.task_id)
        self.status = status
        self.artifacts: dict[str, ArtifactRef] = {}
        self._cancel = cancel
        self._lock = threading.RLock()
        self._written_at = float("-inf")  # monotonic time of the last status write
        self._timer: HeldWrite | None = None  # writes the held progress
        self._ended = False  # a terminal state is written: nothing may follow it
        # metrics and params (runtime/runmetrics.py): written in batches, summarised in
        # the status through the throttled progress writes
        self.metrics = RunMetrics(self.task_dir, self._publish_tracking, HeldWrite,
                                  cancel.deferred)
        _RUNS.add(self)

    def begin(self, pid: int, steps: tuple[str, ...]) -> None:
        """Publish the ``running`` state, listing the task's steps at 0 %."""
        self.status = self.status.model_copy(
            update={"state": TaskState.RUNNING, "started_at": utcnow(), "pid": pid,
                    "steps": [Step(name=name) for name in dict.fromkeys(steps)]}
        )
        self.publish_state(durable=False)
        self.metrics.start()

    def publish_state(self, *, durable: bool) -> None:
        """Journal and write the state now, with any progress held back (at the end, with
        every metric point and param written and summarised)."""
        if self.status.state.terminal:
            self.metrics.close()  # outside the lock: its intake thread may be waiting on it
        with self._lock:
            at = self.status.finished_at or self.status.started_at
            self.records.append_event(state_event(self.status.state, at))
            self._drop_timer()
            if durable:
                self.records.write_status(self.status, durable=True)
                self._written_at = time.monotonic()
            else:
                self._write_status_fast()
            self._ended = self.status.state.terminal

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        self._update(name, started=True)
        yield
        self.metrics.flush()
        self._update(name, percentage=100.0, finished=True)

    def log_metric(self, name: str, value: float, step: int | None = None) -> None:
        self.metrics.log(name, value, step)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        self.metrics.log_many(metrics, step)

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.metrics.log_params(params)

    def progress(self, name: str, percentage: float) -> None:
        self._update(name, percentage=min(100.0, max(0.0, float(percentage))))

    def record_artifact(self, name: str, path: str) -> ArtifactRef:
        with self._cancel.deferred():
            ref = ArtifactRef(**artifact_record(self.task_dir, path))
            with self._lock:
                self.artifacts[name] = ref
        return ref

    def log(self, message: str) -> None:
        print(message, flush=True)

    def _update(
        self, name: str, percentage: float | None = None, started: bool = False,
        finished: bool = False,
    ) -> None:
        with self._cancel.deferred(), self._lock:
            if self._ended:
                return  # a late report (from a thread of the task): the records are final
            step = self._find_step(name)
            changed = _advance(step, percentage, started or finished or percentage is not None)
            if finished and step.finished_at is None:
                step.finished_at = utcnow()
                changed = True
            if changed:
                self.records.append_event({"kind": "progress", **step.model_dump(mode="json")})
                self._write_progress()

    def _publish_tracking(self, metrics: dict[str, Any], params: dict[str, Any]) -> None:
        with self._lock:
            if self._ended:
                return
            self.status.metrics = metrics or None
            self.status.params = params or None
            if not self.status.state.terminal:  # an end's status is written by publish_state
                self._write_progress()

    def _find_step(self, name: str) -> Step:
        for step in self.status.steps:
            if step.name == name:
                return step
        step = Step(name=name)
        self.status.steps.append(step)
        return step

    def _write_progress(self) -> None:
        """Write the status now, or when the interval since the last write ends."""
        wait = self._written_at + PROGRESS_WRITE_INTERVAL - time.monotonic()
        if wait <= 0:
            self._drop_timer()
            self._write_status_fast()
        elif self._timer is None:
            self._timer = HeldWrite(wait, self._write_held)  # the final status supersedes it

    def _write_held(self, timer: HeldWrite) -> None:
        with self._lock:
            if self._timer is not timer or self._ended:
                return  # dropped: a later write took its progress along
            if self.status.state.terminal:  # an end not yet journaled: publish_state writes it
                return
            self._timer = None
            try:
                self._write_status_fast()
            except OSError as exc:  # as a progress write lost in a crash: the next carries it
                print(
                    f"runyard worker: progress not written to status.json: {exc}",
                    file=sys.stderr,
                    flush=True,
                )

    def _drop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _write_status_fast(self) -> None:
        self.records.write_status(self.status, durable=False)
        self._written_at = time.monotonic()


def _after_fork_in_child() -> None:
    _PENDING.clear()  # their threads are the parent's
    for run in list(_RUNS):
        run._lock = threading.RLock()
        run._timer = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def _advance(step: Step, percentage: float | None, start: bool) -> bool:
    """Start ``step`` and raise its percentage (never lower it); whether anything changed."""
    changed = False
    if start and step.started_at is None:
        step.started_at = utcnow()
        changed = True
    if percentage is not None and percentage > step.percentage:
        step.percentage = percentage
        changed = True
    return changed


def result_of(output: Any, artifacts: dict[str, ArtifactRef]) -> dict[str, Any]:
    """The status ``result`` / metadata ``output_params``: the output with its artifacts."""
    result: dict[str, Any] = output.model_dump(mode="json")
    recorded = {name: ref.model_dump(mode="json") for name, ref in artifacts.items()}
    result["artifacts"] = {**result.get("artifacts", {}), **recorded}
    return result


def flush_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):
            stream.flush()
