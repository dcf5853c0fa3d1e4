"""Agent runs as the supervisor holds them: launch, adopt, deadlines, cancel, exits.

    runs = supervisor.agent_runs(executor, on_exit)   # on_exit(run_id, code, reason)
    watched = runs.launch(run_id, session_id, spec, exit_file, timeout)
    runs.watch(watched)                 # once its record says it runs
    runs.cancel(run_id, CANCELLED)      # the whole group (and cgroup), or the pod
    runs.quota_folders()                # {run_id: what counts against agent_limits.disk_mb}
    runs.claim(run_id)                  # (code, reason) once it ended, exactly once
    runs.exit_reason(run_id)            # a claimed pod's end in Kubernetes' words
    runs.release(run_id)                # its end recorded: remove its Job or cgroup

The supervisor's one monitor thread watches a local run's pidfd (checked against its start
time, so a reused PID is never taken for it) and times a pod's poll, which has no pid, every
:data:`POD_POLL_SECONDS`; the poll itself (an API call, up to ``request_timeout_seconds``)
runs on a pod-poll thread of its own, so a slow API never holds up another run's exit.
A run ends exactly once: whoever :meth:`AgentRuns.claim`\\ s it
first (the monitor, or a caller that must settle a session's runs before it goes on) gets
its exit and ``on_exit`` is called for monitor claims only. An adopted local run (started
by an earlier server) reports the code its launcher wrote to its ``exit-code`` file, or
None when it left none; so does a pod whose Job is gone before its end was seen (a
server down longer than the Job's TTL), from what the pod's recorder wrote in its tmp/.
Cancel is the same for a run launched here and an adopted one: the
process group is signalled (SIGTERM, SIGKILL after the grace), then its cgroup is swept.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from runyard.agents.layout import read_exit_file
from runyard.agents.runs import CANCELLED, TIMED_OUT
from runyard.config import Settings
from runyard.errors import ExecutorError
from runyard.executors.base import ExitInfo, Handle, LaunchSpec
from runyard.executors.containment import agent_cgroup_name, sweep
from runyard.executors.kubernetes.status import KubernetesExitInfo, vanished
from runyard.executors.local import terminate_group
from runyard.executors.pidwatch import ExitMonitor, is_alive, process_start_time
from runyard.runtime.agentlaunch import pod_exit_file, read_pod_exit_file
from runyard.runtime.executor import WorkerExecutor

__all__ = ["CANCELLED", "TIMED_OUT", "AgentRuns", "WatchedRun", "handle_from_record"]

log = logging.getLogger(__name__)
KEY_PREFIX = "agent:"  # monitor keys of agent runs (task runs are keyed by their run id)
POD_POLL_SECONDS = 1.0
JOB_GONE = vanished(cancelled=False)  # a pod's end its executor cannot tell
RECORDED = "its Job was gone before its end was seen: the code is the one the run recorded"

ExitReport = Callable[[str, int | None, str], None]


class MonitorHost(Protocol):
    """The supervisor as seen from here: the one monitor thread, while it runs."""

    def exit_monitor(self) -> ExitMonitor | None: ...


@dataclass
class WatchedRun:
    run_id: str
    session_id: str
    pid: int | None
    start_time: int | None
    exit_file: Path
    deadline: float
    handle: Handle | None = None
    reason: str = ""
    exit: ExitInfo | None = None
    folders: tuple[Path, ...] = ()  # what it may write: counted against its disk quota
    # one claimer at a time asks the executor (a pod: the API), without holding up the rest
    claiming: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self) -> dict[str, object]:
        """What the store keeps to find this run again after a restart."""
        if self.pid is None and self.handle is not None:  # a pod: its handle is JSON
            handle = self.handle
            return {"id": handle.id, "labels": handle.labels, "data": handle.data}
        return {"pid": self.pid, "startTime": self.start_time}


def handle_from_record(record: dict[str, Any]) -> Handle | None:
    """The executor handle a record of :meth:`WatchedRun.record` describes, if any."""
    if not isinstance(record.get("data"), dict) or not isinstance(record.get("id"), str):
        return None
    return Handle(id=record["id"], labels=dict(record.get("labels") or {}), data=record["data"])


def deadline_after(seconds: float) -> float:
    return time.monotonic() + seconds


class AgentRuns:
    """The agent runs the supervisor watches, keyed by run id."""

    def __init__(
        self, settings: Settings, executor: WorkerExecutor, host: MonitorHost, on_exit: ExitReport
    ) -> None:
        self.settings = settings
        self.executor = executor
        self._host = host
        self._on_exit = on_exit
        self._runs: dict[str, WatchedRun] = {}
        # claimed runs whose ends are being recorded: what they leave (a pod's Job, a
        # cgroup) is removed only once the end is on record (:meth:`release`)
        self._claimed: dict[str, WatchedRun] = {}
        self._lock = threading.Lock()
        self._reporters: list[threading.Thread] = []
        # pod polls call the API: never on the monitor thread (one slow call would delay
        # every other exit), one at a time on a thread of their own
        self._pod_polls = ThreadPoolExecutor(1, thread_name_prefix="runyard-pod-poll")

    # -- queries ---------------------------------------------------------------------

    def has_slot(self) -> bool:
        """Below ``max_concurrent_runs`` running runs (launched here or adopted)."""
        with self._lock:
            return len(self._runs) < self.settings.max_concurrent_runs

    def of_session(self, session_id: str) -> list[str]:
        with self._lock:
            return [run.run_id for run in self._runs.values() if run.session_id == session_id]

    def watched(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._runs

    def watched_ids(self) -> set[str]:
        """The ids of the runs watched here."""
        with self._lock:
            return set(self._runs)

    def quota_folders(self) -> dict[str, tuple[Path, ...]]:
        """The folders each watched run may write, by run id (for its disk quota)."""
        with self._lock:
            return {run.run_id: run.folders for run in self._runs.values() if run.folders}

    # -- launch and adopt ----------------------------------------------------------------

    def launch(
        self, run_id: str, session_id: str, spec: LaunchSpec, exit_file: Path, timeout: float,
        folders: tuple[Path, ...] = (),
    ) -> WatchedRun:  # fmt: skip
        """Launch ``spec`` (ExecutorError when it cannot start); :meth:`watch` it next.
        ``folders``: what the run may write, held to ``agent_limits.disk_mb``."""
        handle = self.executor.launch(spec)
        pid = handle.pid
        start_time = None if pid is None else process_start_time(pid)
        return WatchedRun(
            run_id, session_id, pid, start_time, exit_file, deadline_after(timeout), handle,
            folders=folders,
        )  # fmt: skip

    def adopt(
        self, run_id: str, session_id: str, record: dict[str, Any], exit_file: Path,
        deadline: float, folders: tuple[Path, ...] = (),
    ) -> bool:  # fmt: skip
        """Watch a run an earlier server started; False when it is gone (its exit file
        then tells how it ended)."""
        pid = record.get("pid")
        pid = pid if isinstance(pid, int) and pid > 0 else None
        start_time = record.get("startTime") if pid is not None else None
        handle = handle_from_record(record) if pid is None else None
        if pid is not None and not is_alive(pid, start_time):
            sweep(agent_cgroup_name(run_id))  # what its ended process left running
            return False
        if pid is None and handle is None:
            return False
        run = WatchedRun(run_id, session_id, pid, start_time, exit_file, deadline, handle)
        run.folders = folders
        self.watch(run)
        return True

    def watch(self, run: WatchedRun) -> None:
        """Watch ``run`` until it ends (or until it is cancelled, or past its deadline)."""
        with self._lock:
            self._runs[run.run_id] = run
        monitor = self._host.exit_monitor()
        if monitor is None:
            return
        if run.pid is not None:
            monitor.watch(KEY_PREFIX + run.run_id, run.pid, run.start_time)
        else:
            self._schedule_pod_poll(run.run_id)
        left = max(0.0, run.deadline - time.monotonic())
        monitor.call_later(left, lambda: self._deadline(run.run_id))

    # -- exits -------------------------------------------------------------------------

    def exited(self, run_id: str) -> None:
        """The monitor saw the run's process end: claim it and report it (off this thread:
        settling a run copies its state folder and must not hold up other exits)."""
        ended = self.claim(run_id)
        if ended is not None:
            self._report(run_id, *ended)

    def _schedule_pod_poll(self, run_id: str) -> None:
        """In :data:`POD_POLL_SECONDS`, the monitor hands the poll to the pod-poll thread."""
        monitor = self._host.exit_monitor()
        if monitor is not None and self.watched(run_id):
            monitor.call_later(POD_POLL_SECONDS, lambda: self._hand_over(run_id))

    def _hand_over(self, run_id: str) -> None:
        try:
            self._pod_polls.submit(self._poll_pod, run_id)
        except RuntimeError:  # closed: the runs are no longer watched here
            return

    def _poll_pod(self, run_id: str) -> None:
        """On the pod-poll thread: claim the run if its pod ended, else poll again later."""
        if not self.watched(run_id):
            return
        try:
            self.exited(run_id)
        except ExecutorError:
            log.exception("Cannot read the state of run %s", run_id)
        except Exception:  # the thread must go on polling every other pod
            log.exception("Polling run %s failed", run_id)
        self._schedule_pod_poll(run_id)

    def claim(self, run_id: str) -> tuple[int | None, str] | None:
        """``(exit code, reason)`` if the run has ended and nobody claimed it yet; the run
        is then no longer watched, and what it leaves (its Job, its cgroup) waits for
        :meth:`release`. The code is None when an adopted run left no exit status."""
        with self._lock:
            run = self._runs.get(run_id)
        if run is None:
            return None
        with run.claiming:  # not under self._lock: a pod's poll may take a while
            if not self._ended(run):
                return None
            with self._lock:
                if self._runs.get(run_id) is not run:  # claimed meanwhile (or closed)
                    return None
                del self._runs[run_id]
                self._claimed[run_id] = run
        return self._exit_code(run), run.reason

    def release(self, run_id: str) -> None:
        """Remove what a claimed run leaves behind (its Job, its cgroup), once its end is
        recorded: a server that dies before then finds the Job and settles the run from it."""
        with self._lock:
            run = self._claimed.pop(run_id, None)
        if run is not None:
            self._release(run)

    def exit_reason(self, run_id: str) -> str:
        """Why a claimed run ended, in its executor's words (a pod's: ``Job failed:
        BackoffLimitExceeded…``, ``not started within 300 s: Unschedulable: …``); empty for
        a local run, and once its end is released."""
        with self._lock:
            run = self._claimed.get(run_id)
        exit_info = run.exit if run is not None else None
        return exit_info.reason if isinstance(exit_info, KubernetesExitInfo) else ""

    def _ended(self, run: WatchedRun) -> bool:
        if run.handle is not None:  # launched here, or a pod: the executor knows
            if run.exit is None:
                run.exit = self._from_the_run(run, self.executor.poll(run.handle))
            return run.exit is not None
        return run.pid is None or not is_alive(run.pid, run.start_time)

    @staticmethod
    def _from_the_run(run: WatchedRun, exit_info: ExitInfo | None) -> ExitInfo | None:
        """A pod whose Job is gone says how it ended through its recorder's file, if any."""
        if exit_info != JOB_GONE:
            return exit_info
        recorded = read_pod_exit_file(pod_exit_file(run.exit_file.parent))
        return exit_info if recorded is None else KubernetesExitInfo(recorded, RECORDED)

    def _exit_code(self, run: WatchedRun) -> int | None:
        if run.exit is not None:
            return run.exit.exit_code
        return read_exit_file(run.exit_file)

    def _release(self, run: WatchedRun) -> None:
        if run.handle is not None:
            try:
                self.executor.cleanup(run.handle)
            except Exception:  # a pod's cleanup talks to the API: it must not stop the settle
                log.exception("Cleaning up after run %s failed", run.run_id)
        else:  # adopted: what the run left running ends with it
            sweep(agent_cgroup_name(run.run_id))

    def _report(self, run_id: str, code: int | None, reason: str) -> None:
        thread = threading.Thread(
            target=self._guard, args=(run_id, code, reason), name=f"settle-{run_id}", daemon=True
        )
        with self._lock:  # started under the lock: close() never joins an unstarted one
            self._reporters = [t for t in self._reporters if t.is_alive()]
            self._reporters.append(thread)
            thread.start()

    def _guard(self, run_id: str, code: int | None, reason: str) -> None:
        try:
            self._on_exit(run_id, code, reason)
        except Exception:
            log.exception("Settling run %s failed", run_id)

    # -- deadlines and cancel ------------------------------------------------------------

    def _deadline(self, run_id: str) -> None:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.reason:
                return
            run.reason = TIMED_OUT
        threading.Thread(
            target=self.cancel, args=(run_id, TIMED_OUT), name=f"timeout-{run_id}", daemon=True
        ).start()

    def cancel(self, run_id: str, reason: str = CANCELLED, grace: float | None = None) -> bool:
        """Stop the run's whole process group (SIGTERM, SIGKILL after the grace, by default
        ``cancel_grace_seconds``) and sweep its cgroup, or delete its pod; False when it is
        not watched here."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return False
            run.reason = run.reason or reason
        grace = self.settings.cancel_grace_seconds if grace is None else grace
        try:
            if run.handle is not None:
                self.executor.cancel(run.handle, grace)
            elif run.pid is not None:
                terminate_group(run.pid, grace, run.start_time)
                sweep(agent_cgroup_name(run_id))
        except ExecutorError:
            log.exception("Cannot cancel run %s", run_id)
        return True

    # -- lifecycle ---------------------------------------------------------------------

    def close(self, timeout: float = 5.0) -> None:
        """Stop watching (the runs go on; the next server adopts them): settles already
        under way finish first."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._runs.clear()
            reporters = list(self._reporters)
        self._pod_polls.shutdown(wait=False, cancel_futures=True)
        for thread in reporters:
            thread.join(max(0.0, deadline - time.monotonic()))

