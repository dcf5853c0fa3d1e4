"""The supervisor: a FIFO queue under ``max_concurrent_tasks``, launch, cancel, reap, reconcile.

    supervisor = Supervisor(settings, workspace, TaskRegistry.load(), on_change=print)
    supervisor.start()
    handle = supervisor.submit("demo", {"x": 1, "y": 2})
    final = wait_for_run(workspace, handle.task_id, handle.run_id)
    supervisor.stop()          # live workers run on; the next start() adopts them

A ``queued`` status on disk IS the queue, so queued work survives a restart. ``start()``
adopts live workers (started by an earlier supervisor, or by ``runyard run``) and records
dead ones as failed. The tasks of one agent run's session hold at most ``agent_task_slots``
of the slots; the queue passes over their further tasks (:mod:`runyard.runtime.fairqueue`)
instead of waiting behind them. One monitor thread notices exits at once (pidfds) and does all
launching, so ``submit`` returns as soon as the records are durable. ``cancel`` and ``delete``
also work on a supervisor that was never started (the CLI uses them that way); a cancel
there waits for the worker to end.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runyard.config import Settings
from runyard.errors import ExecutorError, Forbidden, InvalidInput, UnknownTask, UnknownUpstream
from runyard.executors.cgroups import detect_host
from runyard.executors.containment import (
    AGENT_PREFIX,
    TASK_PREFIX,
    agent_cgroup_name,
    existing_cgroups,
    planned_limits,
    sweep,
    task_cgroup_name,
)
from runyard.executors.local import LocalExecutor
from runyard.executors.pidwatch import ExitMonitor
from runyard.runtime.agentruns import KEY_PREFIX, AgentRuns, ExitReport
from runyard.runtime.attempts import retry_due
from runyard.runtime.cgroupsweep import CgroupSweeper
from runyard.runtime.creation import create_task
from runyard.runtime.deletion import delete_tasks
from runyard.runtime.dependencies import Waiting, parse_depends_on, with_lineage
from runyard.runtime.diskquota import MIB, Account, DiskQuotas
from runyard.runtime.executor import WorkerExecutor, make_executor
from runyard.runtime.fairqueue import FairQueue
from runyard.runtime.gpus import GpuPool, GpuWaits, grant_gpus, granted_devices, host_gpus
from runyard.runtime.heldends import HeldEnds
from runyard.runtime.kubemarks import forget_mark, read_mark
from runyard.runtime.kubetasks import KubernetesTasks, choose_executor
from runyard.runtime.launch import TaskHandle
from runyard.runtime.liveness import (
    cancel_requested,
    record_limits,
    request_cancel,
    settle,
    supervision_path,
    worker_alive,
)
from runyard.runtime.orphans import reconcile_orphans
from runyard.runtime.reconcile import KnownTasks, ended_runs, unfinished_statuses
from runyard.runtime.resources import apply_resources, resolve_resources
from runyard.runtime.retries import (
    RetryWaits,
    due_time,
    mark,
    marked,
    next_attempt,
    unmark,
)
from runyard.runtime.sandboxed import task_sandbox_problem
from runyard.runtime.spacewait import RECHECK_SECONDS as SPACE_RECHECK_SECONDS
from runyard.runtime.spacewait import SpaceWait
from runyard.runtime.submitters import (
    ADMIN,
    Submitter,
    forget_submitter,
    launch_scope,
    session_of,
    slot_owner,
)
from runyard.runtime.taskcache import CacheRequest, TaskCache
from runyard.runtime.taskprocess import ActiveRun, launched, worker_launch_spec, worker_ref
from runyard.runtime.workerlock import hold_supervision
from runyard.tasks.base import declared_resources
from runyard.tasks.registry import TaskRegistry
from runyard.tasks.retrypolicy import RetryPolicy, resolve_policy
from runyard.workspace.identity import parse_task_id
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskState, TaskStatus
from runyard.workspace.space import require_space

if TYPE_CHECKING:
    from runyard.executors.base import ExitInfo
    from runyard.executors.kubernetes import KubernetesExecutor

__all__ = ["Supervisor", "TaskHandle"]

log = logging.getLogger(__name__)
RECHECK_SECONDS = 0.05
WAITING_RECHECK_SECONDS = 1.0  # how soon waiting runs are looked at again, at the latest
RECHECK_MAX_SECONDS = 2.0
RETRY_AGAIN_SECONDS = 2.0  # how soon a retry that could not be made is tried again


class Supervisor:
    """Runs submitted tasks in worker processes and keeps their records converging."""

    def __init__(
        self,
        settings: Settings,
        workspace: Workspace,
        registry: TaskRegistry,
        on_change: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.workspace = workspace
        self.registry = registry
        self._on_change = on_change
        self._lock = threading.RLock()
        self._queue = FairQueue()  # local task runs; the Kubernetes ones below
        self._waiting = Waiting()  # runs held back until their upstreams succeed
        self._cache = TaskCache(workspace, registry)  # cached results of earlier runs
        self._retries = RetryWaits()  # retries held back until their time
        self._gpus: GpuPool | None = None  # the GPUs local runs get, listed on first use
        self._gpu_waits = GpuWaits()  # queued runs waiting for enough free GPUs
        self._retry_timer: float | None = None  # when the monitor looks at them next
        self._active: dict[str, ActiveRun] = {}
        self._monitor: ExitMonitor | None = None
        self._agent_runs: AgentRuns | None = None
        self._executor: WorkerExecutor | None = None
        self._sandbox_executor = LocalExecutor()  # sandboxed workers never use the zygote
        # task runs on Kubernetes: their queue, their side, the executor agent runs share
        self._kube_queue: deque[tuple[str, str]] = deque()
        self._kube: KubernetesTasks | None = None
        self._kube_executor: KubernetesExecutor | None = None
        self._sandbox_problem: str | None = None
        self._sandbox_probed = False
        # below min_free_mb free, queued runs wait for space instead of launching to fail
        self._space = SpaceWait(workspace, settings.min_free_mb)
        self._space_recheck = False  # a look at the space is due from the monitor
        self._waiting_recheck = False  # a look at the waiting runs is due from the monitor
        # the tasks each agent run submitted (seen here): their folders count against its
        # disk quota, and they stop with it when it is over
        self._run_tasks: dict[str, set[str]] = {}
        self._quotas: DiskQuotas | None = None
        # final statuses a full disk kept from being written: served, retried
        self._held = HeldEnds(workspace, self._lock, self._changed, self.exit_monitor)
        # called with a task id after its run ended and was recorded (continuous sync)
        self.on_finished: Callable[[str], object] | None = None
        # called with a task id and the record files that changed, when a worker on
        # another node wrote them (no inotify event reaches this host); else on_change
        self.on_records: Callable[[str, set[str]], object] | None = None
        # called with the status of a task folder a submit has just made (its one record),
        # to index it without reading it back; else on_change
        self.on_created: Callable[[TaskStatus], object] | None = None
        # a built index: start() takes the unfinished and recordless tasks from it instead
        # of reading every folder (None, or an index not built yet: the files are read)
        self.known_tasks: KnownTasks | None = None
        # of the agent run ids given, those whose end the agent store records (set by the
        # agent service): their cgroups go in the first sweep after start
        self.ended_agent_runs: Callable[[set[str]], set[str]] | None = None
        self._cgroup_sweeper: CgroupSweeper | None = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Reconcile every unfinished task, start the monitor, launch queued work FIFO."""
        with self._lock:
            if self._executor is not None:
                return
            self.workspace.ensure()
            self.start_cgroup_sweeper()  # its thread leaves unfinished runs to the loop below
            known = self.known_tasks
            recordless = known.recordless_ids() if known is not None else None
            for rel in reconcile_orphans(self.workspace, recordless):  # each one is logged
                if not Path(rel).name.startswith("."):
                    self._changed(Path(rel).name)
            self._executor = make_executor(self.settings, self.registry, self.workspace)
            if self._tasks_on_kubernetes():  # a ConfigError here stops the start
                self.kubernetes_tasks()
            self.start_monitor()
            self._queue.clear()  # the queued statuses on disk are the queue
            self._waiting.clear()
            self._retries.clear()
            self._gpu_waits.clear()
            self.gpu_pool().clear()  # rebuilt from the runs adopted below
            self._kube_queue.clear()
            cgroups = existing_cgroups()  # nothing is launched until the loop is over
            for status in self._unfinished():
                self._reconcile(status, cgroups)
            self._recover_retries()
            if self._kube is not None:
                self._kube.collect()
            if self._cgroup_sweeper is not None:  # runs that ended while we reconciled
                self._cgroup_sweeper.ask_records()
        self._pump()

    def start_cgroup_sweeper(self) -> None:
        """Remove, in a thread of its own, the cgroups of runs that ended unwatched, then
        keep sweeping until :meth:`stop` (:mod:`runyard.runtime.cgroupsweep`); :meth:`start`
        calls it, a server sooner (its index may take a while). Idempotent."""
        host = detect_host()
        with self._lock:
            if host is None or self._cgroup_sweeper is not None:
                return
            self._cgroup_sweeper = CgroupSweeper(host, self._watched_cgroups, self._recorded_ends)
            self._cgroup_sweeper.start()

    def _watched_cgroups(self) -> set[str]:
        with self._lock:
            runs = set(self._active)
            agent_runs = self._agent_runs
        agents = agent_runs.watched_ids() if agent_runs is not None else set()
        return {task_cgroup_name(r) for r in runs} | {agent_cgroup_name(r) for r in agents}

    def _recorded_ends(self, names: set[str]) -> set[str]:
        """Of the cgroup ``names``, those of runs whose end this workspace records."""
        tasks = {n.removeprefix(TASK_PREFIX) for n in names if n.startswith(TASK_PREFIX)}
        agents = {n.removeprefix(AGENT_PREFIX) for n in names if n.startswith(AGENT_PREFIX)}
        ended = {task_cgroup_name(r) for r in ended_runs(self.workspace, tasks)}
        if agents and self.ended_agent_runs is not None:
            ended |= {agent_cgroup_name(r) for r in self.ended_agent_runs(agents)}
        return ended

    def _unfinished(self) -> list[TaskStatus]:
        """The queued and running statuses, oldest first: from the index when it is built
        (each is read again from its file before it is launched or settled)."""
        found = self.known_tasks.unfinished_statuses() if self.known_tasks is not None else None
        return unfinished_statuses(self.workspace) if found is None else found

    def start_monitor(self) -> ExitMonitor:
        """Start the one thread that watches every run's exit, tasks and agent runs alike
        (:meth:`start` does; an agent service without task supervision calls it alone)."""
        with self._lock:
            if self._monitor is None:
                self._monitor = ExitMonitor(self._on_exit)
                self._monitor.start()
            disk_mb = self.settings.agent_limits.disk_mb
            if self._quotas is None and disk_mb is not None:
                self._quotas = DiskQuotas(disk_mb * MIB, self._quota_accounts, self._over_quota)
                self._quotas.start()
            return self._monitor

    def exit_monitor(self) -> ExitMonitor | None:
        with self._lock:
            return self._monitor

    def agent_runs(self, executor: WorkerExecutor, on_exit: ExitReport) -> AgentRuns:
        """The agent-run side of this supervisor, launching through ``executor`` and
        reporting each run's end to ``on_exit(run_id, code, reason)`` (once)."""
        with self._lock:
            self._agent_runs = AgentRuns(self.settings, executor, self, on_exit)
            return self._agent_runs

    def stop(self) -> None:
        """Stop watching and launching; live workers (and Jobs) keep running."""
        with self._lock:
            monitor, executor = self._monitor, self._executor
            kube, kube_executor = self._kube, self._kube_executor
            quotas, self._quotas = self._quotas, None
            sweeper, self._cgroup_sweeper = self._cgroup_sweeper, None
            self._monitor = self._executor = None
            self._kube, self._kube_executor = None, None
            self._queue.clear()
            self._gpu_waits.clear()
            self._kube_queue.clear()
            for act in self._active.values():
                act.release()
            self._active.clear()
        if monitor is not None:
            monitor.stop()
        if quotas is not None:
            quotas.stop()
        if sweeper is not None:
            sweeper.stop()
        if executor is not None:
            executor.close()
        if kube is not None:
            kube.close()
        if kube_executor is not None:
            kube_executor.close()

    def active_count(self) -> int:
        """Runs this supervisor tracks that are not finished: queued plus running."""
        with self._lock:
            kube = 0 if self._kube is None else self._kube.count()
            queued = len(self._queue) + len(self._waiting) + len(self._kube_queue)
            queued += len(self._gpu_waits)
            return queued + len(self._active) + kube

    # -- Kubernetes ----------------------------------------------------------------------

    def _tasks_on_kubernetes(self) -> bool:
        settings = self.settings
        return settings.task_executor == "kubernetes" or "kubernetes" in set(
            settings.task_executors.values()
        )

    def kubernetes_executor(self) -> KubernetesExecutor:
        """The one Kubernetes executor of this server (task runs and agent runs share its
        watch and sweeper), made on first use; a ConfigError when it cannot be."""
        with self._lock:
            if self._kube_executor is None:
                from runyard.executors.kubernetes import KubernetesExecutor

                executor = KubernetesExecutor.from_settings(self.settings)
                executor.on_change(self._kube_changed)
                self._kube_executor = executor
            return self._kube_executor

    def kubernetes_tasks(self) -> KubernetesTasks:
        with self._lock:
            if self._kube is None:
                self.kubernetes_executor()
                self._kube = KubernetesTasks(
                    self.settings, self.workspace, self.registry, self.kubernetes_executor, self
                )
            return self._kube

    def _kube_changed(self, run_id: str) -> None:
        kube = self._kube
        if kube is not None:
            kube.nudge(run_id)

    def record_end(
        self, task_id: str, run_id: str, info: ExitInfo | None, cancelled: bool, error: str | None
    ) -> TaskStatus | None:
        """Record the end of a Kubernetes task run (the worker's own final status stays)."""
        with self._lock:
            return self._held.end(task_id, run_id, info, cancelled=cancelled, error=error)

    def announce(self, task_id: str, names: set[str] | None = None) -> None:
        """A Kubernetes task's records changed (``names``: which files, when known)."""
        if names is None or self.on_records is None:
            self._changed(task_id)
            return
        try:
            self.on_records(task_id, names)
        except Exception:
            log.exception("on_records(%s) failed", task_id)

    def run_ended(self, task_id: str) -> None:
        self._finished(task_id)
        with self._lock:
            if self._monitor is not None:
                self._monitor.call_later(0.0, self._pump)

    # -- submit ------------------------------------------------------------------------

    def submit(
        self,
        task: str,
        inputs: dict[str, Any],
        submitted_by: Submitter = ADMIN,
        idempotency_key: str | None = None,
        executor: str | None = None,
        depends_on: object = None,
        retries: int | None = None,
        retry_delay_seconds: float | None = None,
        cache: CacheRequest | None = None,
        resources: object = None,
    ) -> TaskHandle:
        """Queue a run of ``task``; raises UnknownTask, InvalidInput or TaskActive.

        ``cache`` (else the task class's ``cache``): a submit whose cache key matches an
        earlier success answers that task's handle with ``cached`` true and makes nothing
        (:mod:`runyard.runtime.taskcache`).

        ``retries`` and ``retry_delay_seconds`` (else the task class's) run a failed run
        again as a new run of the task (:mod:`runyard.runtime.retries`).

        ``depends_on`` (upstream ids, a list or a comma-separated string) holds the run back
        until every upstream succeeded (:mod:`runyard.runtime.dependencies`); an id that
        names no task the submitter may see is :class:`UnknownUpstream`, nothing made.

        ``resources`` (``{cpus, memory_mb, gpus, gpu_type}``) win field by field over the
        ``task_resources`` setting and the task class's (:mod:`runyard.runtime.resources`);
        a local run asking for more GPUs than this server controls, or beyond
        ``task_limits``, is :class:`ResourcesRefused` with nothing made.

        ``executor`` (``local`` or ``kubernetes``) overrides where it runs (else
        ``task_executors``, then ``task_executor``). A run-submitted task always runs in
        its sandbox on this host.

        A run-submitted task (``submitted_by`` a dict) will run sandboxed; where no
        sandbox works, :class:`Forbidden` says why and nothing is written. Below
        ``min_free_mb`` free, or on a full disk, :class:`InsufficientStorage`.
        """
        require_space(self.workspace.root, self.settings.min_free_mb)
        upstreams = self._upstreams(depends_on, submitted_by)
        inputs = with_lineage(inputs, upstreams)
        on_kubernetes = self._on_kubernetes(task, submitted_by, executor)
        task_cls = self.registry.get(task).task_cls
        policy = resolve_policy(task_cls, retries, retry_delay_seconds)
        gpu_count = None if on_kubernetes else len(self.gpu_pool().devices)
        asked = resolve_resources(
            self.settings, task, declared_resources(task_cls), resources, gpu_count,
            sandboxed=isinstance(submitted_by, dict),
        )  # fmt: skip
        if policy.retries and on_kubernetes:
            if retries:
                raise InvalidInput("retries are for tasks run by this server's own executor")
            policy = RetryPolicy()  # a task class's default: a Kubernetes run is tried once
        if upstreams and on_kubernetes:
            raise InvalidInput(
                "depends_on is for tasks run by this server's own executor; a task sent to "
                "Kubernetes cannot wait for upstreams yet"
            )
        if isinstance(submitted_by, dict):
            problem = self.sandbox_problem()
            if problem is not None:
                raise Forbidden(f"Tasks submitted by an agent run must run sandboxed: {problem}")
        plan = self._cache.plan(task, inputs, submitted_by, cache or CacheRequest())
        if plan.hit is not None:
            return plan.hit
        status = create_task(
            self.workspace, self.registry, task, inputs, submitted_by, idempotency_key, upstreams,
            policy.first_fields(), plan.status_fields(), asked.record() or None,
        )  # fmt: skip
        self._cache.noted(plan, status.task_id)
        if policy.retries:  # found at a start even if an attempt ends while none runs
            mark(self.workspace, status.task_id)
        if on_kubernetes and read_mark(self.workspace, status.task_id, status.run_id) is None:
            self.kubernetes_tasks().queue_mark(status)  # before anything launches it
        with self._lock:
            self._held.discard(status.task_id)  # an earlier run's held end: replaced
        self._created(status)
        with self._lock:
            if upstreams:
                self._waiting.add(status.task_id, status.run_id, slot_owner(submitted_by))
                self._note_run_task(submitted_by, status.task_id)
            elif on_kubernetes:
                self._kube_queue.append((status.task_id, status.run_id))
            else:
                self._queue.append(status.task_id, status.run_id, slot_owner(submitted_by))
                self._note_run_task(submitted_by, status.task_id)
            if self._monitor is not None:  # launch from the monitor thread: submit returns now
                self._monitor.call_later(0.0, self._pump)
        return TaskHandle(task_id=status.task_id, run_id=status.run_id, task=task)

    @contextlib.contextmanager
    def launches_held(self) -> Iterator[None]:
        """Launch nothing while the body runs (its submits queue as usual): a pipeline
        run's steps are made all or none, and none starts before all exist."""
        with self._lock:
            yield

    def _upstreams(self, depends_on: object, submitted_by: Submitter) -> list[str]:
        """The ids of ``depends_on``, each a task the submitter may see (a run's: its own
        session's), else :class:`UnknownUpstream` naming those that are not."""
        ids = parse_depends_on(depends_on)
        session = submitted_by.get("session_id") if isinstance(submitted_by, dict) else None
        unknown = [
            task_id for task_id in ids
            if not os.path.lexists(self.workspace.task_dir(task_id))
            or (session is not None and session_of(self.workspace, task_id) != session)
        ]  # fmt: skip
        if unknown:
            raise UnknownUpstream(unknown)
        return ids

    def _on_kubernetes(self, task: str, submitted_by: Submitter, executor: str | None) -> bool:
        if isinstance(submitted_by, dict):
            if executor == "kubernetes":
                raise InvalidInput(
                    "A task submitted by an agent run runs in its sandbox on this host: "
                    "executor 'kubernetes' is for admin submits"
                )
            return False
        self.registry.get(task)  # UnknownTask first, as for any submit
        if choose_executor(self.settings, task, executor) != "kubernetes":
            return False
        self.kubernetes_tasks()  # a ConfigError (say, no node to pin to) before any write
        return True

    def _pump(self) -> None:
        with self._lock:
            self._release_waiting()
            self._release_retries()
            if self._waits_for_space():
                return
            while self._executor is not None and self._has_slot():
                capped = self._capped_owners()
                free = len(self.gpu_pool().free())
                queued = self._gpu_waits.pop_fitting(free, capped) or self._queue.pop_next(capped)
                if queued is None:
                    break
                self._launch(*queued)
            while self._executor is not None and self._kube_queue:
                kube = self.kubernetes_tasks()
                if not kube.has_slot():
                    break
                task_id, run_id = self._kube_queue.popleft()
                status = self.workspace.read_status(task_id)
                if status is not None and status.run_id == run_id and not status.terminal:
                    kube.launch(status)

    def _release_waiting(self) -> None:
        """Queue the held-back runs whose upstreams all succeeded, end those one of whose
        failed; look again in a moment while any still wait (an upstream may end in
        another process: the CLI, another node)."""
        if not self._waiting:
            return
        ready, failed = self._waiting.verdicts(self.workspace)
        for task_id, entry in ready:
            status = self.workspace.read_status(task_id)
            if status is not None and status.run_id == entry.run_id:
                released = {"waiting_for": None, **self._cache.key_at_release(status)}
                self.workspace.write_status(status.model_copy(update=released))
                self._changed(task_id)
            self._queue.append(task_id, entry.run_id, entry.owner)
        for task_id, entry, error in failed:
            self._held.end(task_id, entry.run_id, error=error)
            self._changed(task_id)
        if self._waiting and self._monitor is not None and not self._waiting_recheck:
            self._waiting_recheck = True
            self._monitor.call_later(WAITING_RECHECK_SECONDS, self._recheck_waiting)

    def _recheck_waiting(self) -> None:
        with self._lock:
            self._waiting_recheck = False
        self._pump()

    # -- retries (runtime/retries) ---------------------------------------------------------

    def _follow_end(self, status: TaskStatus | None, cancelled: bool = False) -> None:
        """After a run ended: the next attempt when a retry is due, held until its time. A
        run cancelled as it failed gets one too, ended ``cancelled`` at once: no attempt
        runs, and nothing is left looking as if a retry were still to come."""
        if status is None or status.retries is None:
            return
        if not retry_due(status):
            unmark(self.workspace, status.task_id)  # it ended for good
            return
        cancelled = cancelled or cancel_requested(self.workspace, status.task_id, status.run_id)
        try:
            queued = next_attempt(self.workspace, status)
        except OSError as exc:  # a full disk, say: the failed attempt waits for its retry
            log.warning("Cannot make the retry of %s yet (%s); trying again", status.task_id, exc)
            self._follow_later(status, cancelled)
            return
        if queued is None:  # not the folder's run any more, or its end not written yet
            return
        if cancelled:
            self._held.end(queued.task_id, queued.run_id, cancelled=True)
            unmark(self.workspace, queued.task_id)
        else:
            self._hold_retry(queued)
        self._changed(queued.task_id)

    def _follow_later(self, status: TaskStatus, cancelled: bool) -> None:
        def again() -> None:
            with self._lock:
                self._follow_end(status, cancelled)
            self._pump()

        if self._monitor is not None:
            self._monitor.call_later(RETRY_AGAIN_SECONDS, again)

    def _hold_retry(self, status: TaskStatus) -> None:
        owner = slot_owner(launch_scope(self.workspace, status))
        self._retries.add(status.task_id, status.run_id, owner, due_time(status) or 0.0)

    def _recover_retries(self) -> None:
        """At a start: the attempts that ended while no supervisor watched get their retry."""
        for task_id in marked(self.workspace):
            status = self.workspace.read_status(task_id)
            if status is None or (status.terminal and status.retries is None):
                unmark(self.workspace, task_id)  # deleted, or replaced by a run without retries
            elif status.terminal:
                self._follow_end(status)

    def _release_retries(self) -> None:
        """Queue the retries whose time has come; look again when the next one's comes."""
        now = time.time()
        for task_id, entry in self._retries.take_due(now):
            status = self.workspace.read_status(task_id)
            if status is None or status.run_id != entry.run_id or status.terminal:
                continue
            self.workspace.write_status(
                status.model_copy(update={"retry_at": None, "queued_reason": None})
            )
            self._changed(task_id)
            self._queue.append(task_id, entry.run_id, entry.owner)
        due = self._retries.next_due()
        if due is None or self._monitor is None:
            return
        if self._retry_timer is None or due < self._retry_timer:
            self._retry_timer = due
            self._monitor.call_later(max(0.0, due - now), self._recheck_retries)

    def _recheck_retries(self) -> None:
        with self._lock:
            self._retry_timer = None
        self._pump()

    def _waits_for_space(self) -> bool:
        """Short of ``min_free_mb``: nothing launches, the queued runs say why, and the
        queue is looked at again in a moment (:mod:`runyard.runtime.spacewait`)."""
        if self._executor is None or self._monitor is None:
            return False
        wanted = (self._queue and self._has_slot()) or self._kube_queue
        if not wanted or not self._space.holds(self._queued_runs):
            return False
        if not self._space_recheck:
            self._space_recheck = True
            self._monitor.call_later(SPACE_RECHECK_SECONDS, self._recheck_space)
        return True

    def _queued_runs(self) -> list[tuple[str, str]]:
        return [*self._queue.entries(), *self._kube_queue]

    def _recheck_space(self) -> None:
        with self._lock:
            self._space_recheck = False
        self._pump()

    def sandbox_problem(self) -> str | None:
        """Why run-submitted tasks cannot be sandboxed here (probed once), or None."""
        with self._lock:
            if not self._sandbox_probed:
                self._sandbox_problem = task_sandbox_problem(self.settings)
                self._sandbox_probed = True
            return self._sandbox_problem

    def gpu_pool(self) -> GpuPool:
        """The GPUs local task runs are granted (the ``gpus`` setting, else NVML's, listed
        on first use) and who holds them."""
        with self._lock:
            if self._gpus is None:
                self._gpus = GpuPool(host_gpus(self.settings.gpus))
            return self._gpus

    def _has_slot(self) -> bool:
        return len(self._active) < self.settings.max_concurrent_tasks

    def _capped_owners(self) -> set[str | None]:
        """The sessions whose tasks hold ``agent_task_slots`` slots already."""
        held = Counter(act.owner for act in self._active.values() if act.owner is not None)
        return {owner for owner, n in held.items() if n >= self.settings.agent_task_slots}

    def _launch(self, task_id: str, run_id: str) -> None:
        status = self.workspace.read_status(task_id)
        if status is None or status.run_id != run_id or status.state is not TaskState.QUEUED:
            return
        if worker_alive(self.workspace, task_id):
            self._adopt(status)
            return
        assert self._executor is not None and self._monitor is not None
        granted = grant_gpus(self.workspace, self.gpu_pool(), self._gpu_waits, status)
        if granted is None:
            return  # it waits for GPUs; runs behind it that need fewer go first
        status = self._space.launching(granted)  # its worker carries no stale reason on
        supervision = hold_supervision(supervision_path(self.workspace, task_id))
        scope = launch_scope(self.workspace, status)
        executor = self._executor if scope is None else self._sandbox_executor
        try:
            spec = worker_launch_spec(
                self.settings, self.workspace, self.registry, status, scope, self.sandbox_problem
            )
            spec = apply_resources(spec, status, self.gpu_pool().controlled)
            record_limits(self.workspace, task_id, run_id, planned_limits(executor, spec))
            handle = executor.launch(spec)
        except (UnknownTask, ExecutorError, Forbidden, OSError) as exc:
            if supervision is not None:
                os.close(supervision)
            self.gpu_pool().release(run_id)
            self._held.end(task_id, run_id, error=f"{type(exc).__name__}: {exc}")
            self._changed(task_id)
            return
        act = launched(self.workspace, status, handle, executor, scope is not None, supervision)
        act.owner = slot_owner(scope)
        self._note_run_task(scope, task_id)
        self._active[run_id] = act
        self._monitor.watch(run_id, act.pid)

    # -- reconcile and exits -------------------------------------------------------------

    def _reconcile(self, status: TaskStatus, cgroups: frozenset[str]) -> None:
        record = read_mark(self.workspace, status.task_id, status.run_id)
        if record is not None:
            self._reconcile_kube(status, record)
            return
        if worker_alive(self.workspace, status.task_id):
            self._adopt(status)
            return
        cgroup = task_cgroup_name(status.run_id)
        if cgroup in cgroups:
            sweep(cgroup)  # what its ended worker left running
        if status.state is TaskState.QUEUED:
            owner = slot_owner(launch_scope(self.workspace, status))
            if status.retries is not None:
                mark(self.workspace, status.task_id)  # lost if a crash came right after its submit
            if due_time(status) is not None:
                self._hold_retry(status)
            elif status.waiting_for:
                self._waiting.add(status.task_id, status.run_id, owner)
            else:
                self._queue.append(status.task_id, status.run_id, owner)
        elif settle(self.workspace, status) is not status:
            self._changed(status.task_id)

    def _reconcile_kube(self, status: TaskStatus, record: dict[str, Any]) -> None:
        """A run on Kubernetes: followed again by its Job, never by a process here."""
        if self.settings.kubernetes is None:
            error = "It ran on Kubernetes, which this server is no longer configured for"
            self._held.end(status.task_id, status.run_id, error=error)
            self._changed(status.task_id)
            return
        if not self.kubernetes_tasks().adopt(status, record):
            self._kube_queue.append((status.task_id, status.run_id))

    def _adopt(self, status: TaskStatus) -> ActiveRun | None:
        """Watch the live worker of ``status`` (one we did not launch) if we are started."""
        ref = worker_ref(self.workspace, status)
        if ref is None:
            return None
        act = self._active.get(status.run_id)
        if act is None:
            act = ActiveRun(status.task_id, status.run_id, ref.pid, ref.start_time)
            scope = launch_scope(self.workspace, status)
            act.owner = slot_owner(scope)
            self._note_run_task(scope, status.task_id)
        act.pid, act.start_time = ref.pid, ref.start_time
        if self._executor is not None and self._monitor is not None:  # tasks supervised here
            self.gpu_pool().restore(status.run_id, granted_devices(status))  # no second grant
            if act.supervision_fd is None:
                path = supervision_path(self.workspace, status.task_id)
                act.supervision_fd = hold_supervision(path)
            self._active[status.run_id] = act
            self._monitor.watch(status.run_id, ref.pid, ref.start_time)
        return act

    def _on_exit(self, run_id: str, pidfd: int | None) -> None:
        if run_id.startswith(KEY_PREFIX):
            if self._agent_runs is not None:
                self._agent_runs.exited(run_id.removeprefix(KEY_PREFIX))
            return
        with self._lock:
            act = self._active.get(run_id)
        if act is None:
            return
        # not under the lock: for a pre-forked worker this waits for the launcher to reap it
        # and report its exit code, and submits must not wait for that
        info = act.exit_info(pidfd)
        with self._lock:
            if self._active.get(run_id) is not act:
                return  # stopped meanwhile
            status = self._held.end(
                act.task_id, run_id, info, cancelled=act.cancelling, error=act.failure
            )
            if status is not None and status.run_id == run_id and not status.terminal:
                self._still_held(act, status)
                return
            del self._active[run_id]
            act.release()
            self.gpu_pool().release(run_id)
            if act.handle is not None and act.executor is not None:
                act.executor.cleanup(act.handle)
            else:  # adopted: what the worker left running dies with it
                sweep(task_cgroup_name(run_id))
            if status is not None and status.run_id == run_id:
                self._follow_end(status, act.cancelling)
        self._changed(act.task_id)
        self._finished(act.task_id)
        self._pump()

    def _finished(self, task_id: str) -> None:
        if self.on_finished is None:
            return
        try:
            self.on_finished(task_id)
        except Exception:
            log.exception("on_finished(%s) failed", task_id)

    def _still_held(self, act: ActiveRun, status: TaskStatus) -> None:
        """The run is unfinished and its lock is held: another worker, or a settler."""
        if act.handle is not None and act.executor is not None:
            act.executor.cleanup(act.handle)
            act.handle = None
        ref = worker_ref(self.workspace, status)
        if ref is not None and ref.pid != act.pid and self._monitor is not None:
            act.pid, act.start_time = ref.pid, ref.start_time
            self._monitor.watch(act.run_id, ref.pid, ref.start_time)
        elif self._monitor is not None:  # back off: a process that inherited the lock may linger
            delay = min(RECHECK_MAX_SECONDS, RECHECK_SECONDS * 2**act.rechecks)
            act.rechecks += 1
            self._monitor.call_later(delay, lambda: self._on_exit(act.run_id, None))

    # -- disk quotas of agent runs ---------------------------------------------------------

    def _note_run_task(self, submitted_by: Submitter | None, task_id: str) -> None:
        if isinstance(submitted_by, dict) and submitted_by.get("run_id"):
            self._run_tasks.setdefault(str(submitted_by["run_id"]), set()).add(task_id)

    def _quota_accounts(self) -> list[Account]:
        """Each agent run that runs, or whose tasks do: its folders and its tasks' folders
        (runs with neither are forgotten)."""
        agent_runs = self._agent_runs
        folders = agent_runs.quota_folders() if agent_runs is not None else {}
        with self._lock:
            running = {act.task_id for act in self._active.values()}
            live = set(folders) | {r for r, ids in self._run_tasks.items() if ids & running}
            for run_id in set(self._run_tasks) - live:
                del self._run_tasks[run_id]
            tasks = {run_id: sorted(self._run_tasks.get(run_id, ())) for run_id in live}
        return [
            Account(run_id, [*folders.get(run_id, ()), *map(self.workspace.task_dir, ids)])
            for run_id, ids in tasks.items()
        ]

    def _over_quota(self, run_id: str, message: str) -> None:
        """Stop the run (it fails with ``message``) and its running tasks, killed at once."""
        if self._agent_runs is not None:
            self._agent_runs.cancel(run_id, message, grace=0.0)
        with self._lock:
            ids = self._run_tasks.get(run_id, set())
            acts = [act for act in self._active.values() if act.task_id in ids]
            for act in acts:
                act.failure = message
        for act in acts:
            act.terminate(0.0)

    # -- cancel ------------------------------------------------------------------------

    def cancel(self, task_id: str) -> bool:
        """Cancel the queued or running run of ``task_id``; True only if this call did."""
        try:
            parse_task_id(task_id)
        except InvalidInput:
            return False
        with self._lock:
            if self._held.holds(task_id):  # it ended; only its record waits for space
                return False
            queued = self._queue.take(task_id)
            waiting = self._waiting.take(task_id) or self._retries.take(task_id)
            if waiting is not None:
                queued = (task_id, waiting.run_id)
            gpu_wait = self._gpu_waits.take(task_id)
            if gpu_wait is not None:
                queued = (task_id, gpu_wait.run_id)
            if queued is None:
                queued = next((item for item in self._kube_queue if item[0] == task_id), None)
                if queued is not None:
                    self._kube_queue.remove(queued)
            if queued is not None:
                return self._cancel_queued(task_id, queued[1])
            status = self.workspace.read_status(task_id)  # an exiting earlier run may linger
            act = self._active.get(status.run_id) if status is not None else None
            kube = self._kube
        if kube is not None and status is not None and kube.tracks(status.run_id):
            return kube.cancel(task_id, status.run_id)
        if act is not None:
            return self._request_cancel(act)
        return self._cancel_untracked(task_id)

    def _cancel_queued(self, task_id: str, run_id: str) -> bool:
        final = self._held.end(task_id, run_id, cancelled=True)
        if final is not None and final.run_id == run_id and final.state is TaskState.CANCELLED:
            self._changed(task_id)
            return True
        return self._cancel_untracked(task_id)

    def _cancel_untracked(self, task_id: str) -> bool:
        status = self.workspace.read_status(task_id)
        if status is None or settle(self.workspace, status).terminal:
            return False
        if status.tracked is not None:  # no worker to signal (a run MLflow's client opened)
            final = self._held.end(task_id, status.run_id, cancelled=True)
            self._changed(task_id)
            return final is not None and final.state is TaskState.CANCELLED
        with self._lock:
            act = self._adopt(status)
        if act is not None:
            return self._request_cancel(act)
        if status.state is TaskState.QUEUED and not worker_alive(self.workspace, task_id):
            return self._cancel_queued(task_id, status.run_id)
        return False

    def _request_cancel(self, act: ActiveRun) -> bool:
        with self._lock:
            status = self.workspace.read_status(act.task_id)
            if act.cancelling or status is None or status.run_id != act.run_id or status.terminal:
                return False
            act.cancelling = True
            watched = self._monitor is not None and act.run_id in self._active
            request_cancel(self.workspace, act.task_id, act.run_id)
        if watched:
            threading.Thread(
                target=act.terminate,
                args=(self.settings.cancel_grace_seconds,),
                name=f"cancel-{act.pid}",
                daemon=True,
            ).start()
        else:
            act.terminate(self.settings.cancel_grace_seconds)
            self._held.end(act.task_id, act.run_id, cancelled=True)
            self._changed(act.task_id)
        return True

    # -- delete ------------------------------------------------------------------------

    def delete(self, task_ids: list[str]) -> list[str]:
        """Delete finished, metadata-only or broken tasks; the ids really deleted."""
        with self._lock:
            held = [task_id for task_id in task_ids if self._held.holds(task_id)]
        deleted = [task_id for task_id in held if self._held.delete(task_id)]
        rest = [task_id for task_id in task_ids if task_id not in held]
        deleted += delete_tasks(self.workspace, rest)
        for task_id in deleted:
            forget_submitter(self.workspace, task_id)
            forget_mark(self.workspace, task_id)
            self._changed(task_id)
        return deleted

    # -- a full disk -----------------------------------------------------------------------

    def unwritten_status(self, task_id: str) -> TaskStatus | None:
        """The final status of ``task_id`` a full disk keeps from its file, as served."""
        return self._held.shown(task_id)

    def unwritten_count(self) -> int:
        return self._held.count()

    def _created(self, status: TaskStatus) -> None:
        if self.on_created is None:
            self._changed(status.task_id)
            return
        try:
            self.on_created(status)
        except Exception:
            log.exception("on_created(%s) failed", status.task_id)

    def _changed(self, task_id: str) -> None:
        if self._on_change is None:
            return
        try:
            self._on_change(task_id)
        except Exception:
            log.exception("on_change(%s) failed", task_id)

