"""Task runs as Kubernetes Jobs: launch, follow, cancel, and adopt after a restart.

    kube = KubernetesTasks(settings, workspace, registry, executor_factory, host)
    kube.queue_mark(status)          # at submit: this run goes to Kubernetes
    kube.launch(status)              # its Job is created on a thread of its own
    kube.adopt(status, record)       # after a restart: by the recorded handle, else by labels
    kube.collect()                   # Jobs of runs that ended while no server followed them
    kube.cancel(task_id, run_id)     # the Job deleted with its grace period
    kube.close()                     # stop following; the Jobs run on, the next start adopts

The pod runs the same worker as a local run (``python -m runyard.runtime.worker``, the same
payload on stdin), with the workspace and the log folder mounted at the same paths as here
(a ReadWriteMany claim in ``pvc`` mode, host folders in ``hostPath`` mode), so it writes
status, events, metadata, artifacts and its own log exactly as locally: the records stay
the contract, and the log outlives the pod.

A running Kubernetes task is followed two ways, as writes on another node raise no inotify
event here: its records are read every ``kubernetes.record_poll_seconds`` (a change is
announced as for a local task), and its Job is read every :data:`POLL_SECONDS` (through the
executor, which answers from its watch of Jobs and Pods when it has one). Once the Job has
ended, the supervisor records the end (the worker's own final status when it wrote one,
else what Kubernetes reports), and only then is the Job deleted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runyard.config import Settings
from runyard.errors import ExecutorError, InvalidInput
from runyard.executors.base import ExitInfo, Handle, LaunchSpec, Mount
from runyard.executors.containment import to_limits
from runyard.runtime.environment import without_secrets
from runyard.runtime.kubemarks import mark, read_mark
from runyard.runtime.launch import WORKER_MODULE
from runyard.runtime.liveness import record_limits, request_cancel, supervision_path
from runyard.runtime.resources import apply_resources, resolve_resources
from runyard.runtime.worker import CANCEL_NEEDS_REQUEST, WorkerPayload
from runyard.runtime.workerlock import hold_supervision
from runyard.tasks.base import declared_resources
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import EVENTS_FILE, STATUS_FILE, Workspace
from runyard.workspace.records import TaskState, TaskStatus

if TYPE_CHECKING:
    from runyard.executors.kubernetes import KubernetesExecutor
    from runyard.executors.kubernetes.manifests import RunOptions
    from runyard.kubernetes_settings import ResourceSettings

log = logging.getLogger(__name__)
POLL_SECONDS = 1.0
BUSY_SECONDS = 0.05  # how long a nudge waits for the pass under way to end
EXECUTORS = ("local", "kubernetes")
RUN_ID_LABEL = "runyard.dev/run-id"
TASK_ID_KEY = "runyard.dev/task-id"  # an annotation: a task id is no label value
GONE = "its Job is gone and it left no final status"
RECORDS = (STATUS_FILE, EVENTS_FILE)  # read while a run goes on: no inotify across nodes


def choose_executor(settings: Settings, task: str, requested: str | None) -> str:
    """Where a run of ``task`` runs: the submit's ``executor``, else the task definition's
    entry in ``task_executors``, else ``task_executor``."""
    if requested is not None and requested not in EXECUTORS:
        raise InvalidInput(f"executor must be one of {', '.join(EXECUTORS)}, not {requested!r}")
    name = requested or settings.task_executors.get(task) or settings.task_executor
    if name == "kubernetes" and settings.kubernetes is None:
        raise InvalidInput(
            "executor 'kubernetes' is not configured on this server (no 'kubernetes:' settings)"
        )
    return name


def task_launch_spec(
    settings: Settings, workspace: Workspace, status: TaskStatus, target: str
) -> LaunchSpec:
    """The worker of ``status`` as a pod runs it: the image's Python, the workspace and the
    log folder at the same paths as here, ``worker_env`` (never the server's environment,
    which means nothing in the image), ``task_limits`` as the container's limits, where
    the run's own ``resources`` (cpus, memory_mb) replace them."""
    assert settings.kubernetes is not None
    payload = WorkerPayload(
        workspace=str(workspace.root), log_dir=str(workspace.log_dir),
        task_id=status.task_id, run_id=status.run_id, target=target,
    )  # fmt: skip
    task_dir = workspace.task_dir(status.task_id)
    env = without_secrets(settings.worker_env, settings)
    env.update(
        RUNYARD_TASK_ID=status.task_id, RUNYARD_RUN_ID=status.run_id,
        RUNYARD_TASK_DIR=str(task_dir),
    )  # fmt: skip
    env[CANCEL_NEEDS_REQUEST] = "1"  # a pod is also stopped unasked (deadline, eviction)
    spec = LaunchSpec(
        argv=[settings.kubernetes.python, "-m", WORKER_MODULE],
        log_path=Path(
            os.path.abspath(workspace.run_log_path(status.task_id, status.run_id))
        ),
        cwd=task_dir,
        env=env,
        stdin=payload.dump(),
        mounts=shared_mounts(workspace),
        labels={RUN_ID_LABEL: status.run_id, TASK_ID_KEY: status.task_id},
        limits=to_limits(settings.task_limits, settings.kubernetes.task_deadline_seconds),
    )
    return apply_resources(spec, status, controlled=False)  # the device plugin picks GPUs


def shared_mounts(workspace: Workspace) -> list[Mount]:
    """The workspace and (when outside it) the log folder, each at its own path."""
    root, logs = workspace.root.resolve(), workspace.log_dir.resolve()
    mounts = [Mount(root, str(root))]
    if not logs.is_relative_to(root):
        mounts.append(Mount(logs, str(logs)))
    return mounts


def task_resources(settings: Settings, task: str) -> ResourceSettings | None:
    assert settings.kubernetes is not None
    return settings.kubernetes.task_resources.get(task)


def run_options(settings: Settings, task: str, status: TaskStatus) -> RunOptions:
    """How the run's Job differs from others: its log written in the pod, its definition's
    ``kubernetes.task_resources`` with the run's cpus and memory as requests, its GPUs."""
    from runyard.executors.kubernetes.gpus import asked_requests, gpu_options
    from runyard.executors.kubernetes.manifests import RunOptions

    assert settings.kubernetes is not None
    configured = task_resources(settings, task) or settings.kubernetes.resources
    return RunOptions(
        log_in_pod=True, resources=asked_requests(configured, status.resources), task=task,
        **gpu_options(status.resources),
    )  # fmt: skip


def resources_report(spec: LaunchSpec, resources: ResourceSettings | None, settings: Settings
                     ) -> dict[str, Any]:  # fmt: skip
    """What limits the run, as its status keeps it (``limits``)."""
    from runyard.executors.kubernetes.container import resources as container_resources

    assert settings.kubernetes is not None
    chosen = container_resources(spec.limits, resources or settings.kubernetes.resources)
    return {"enforced_by": "kubernetes", **chosen}


def job_preview(
    settings: Settings, workspace: Workspace, registry: TaskRegistry, task: str,
    inputs: dict[str, Any],
) -> list[dict[str, Any]]:  # fmt: skip
    """The Job, Secret and NetworkPolicy a submit of ``task`` with ``inputs`` would create,
    with the settings in force; nothing is written and no cluster is contacted. The Job is
    shown resumed (the executor creates it suspended and resumes it once what it owns
    exists), the Secret's environment values are redacted, and nothing carries owner
    references (they need the created Job's uid)."""
    from runyard.executors.kubernetes.manifests import build_manifests
    from runyard.executors.kubernetes.placement import INSTANCE_FILE, resolve_settings

    if settings.kubernetes is None:
        raise InvalidInput("No 'kubernetes:' settings: set at least kubernetes.image")
    k8s = settings.kubernetes
    if k8s.instance is None:  # the workspace's, when a server recorded one; never made here
        with contextlib.suppress(OSError):
            recorded = (workspace.root / INSTANCE_FILE).read_text().strip()
            k8s = k8s.model_copy(update={"instance": recorded or None})
    k8s = resolve_settings(k8s)
    status = planned_status(workspace, registry, task, inputs)
    declared = declared_resources(registry.get(task).task_cls)
    asked = resolve_resources(settings, task, declared, None, None).record() or None
    status = status.model_copy(update={"resources": asked})
    spec = task_launch_spec(settings, workspace, status, registry.get(task).target)
    options = run_options(settings, task, status)
    manifests = build_manifests(spec, k8s, status.run_id, None, options)
    manifests.job["spec"]["suspend"] = False
    return [manifests.job, *(_redacted(doc) for doc in manifests.dependents)]


def planned_status(
    workspace: Workspace, registry: TaskRegistry, task: str, inputs: dict[str, Any]
) -> TaskStatus:
    """The ``queued`` status a submit would write (inputs validated), written nowhere."""
    import uuid

    from runyard.workspace.identity import build_task_id, generate_task_name
    from runyard.workspace.records import utcnow

    registered = registry.get(task)
    typed = registry.validate_inputs(task, inputs)
    task_type = registered.definition.task_type
    task_id = build_task_id(task_type, task, typed.task_name or generate_task_name(task))
    run_id = uuid.uuid4().hex
    config = typed.model_dump(mode="json")
    config["task_name"] = task_id.rsplit("#", 1)[1]
    return TaskStatus(
        task_id=task_id, run_id=run_id, task_type=task_type, task_name=task,
        state=TaskState.QUEUED, config=config, created_at=utcnow(),
        log_path=os.path.abspath(workspace.run_log_path(task_id, run_id)),
    )  # fmt: skip


def _redacted(doc: dict[str, Any]) -> dict[str, Any]:
    import base64

    from runyard.executors.kubernetes.container import SECRET_ENV_PREFIX

    if doc.get("kind") != "Secret":
        return doc
    hidden = base64.b64encode(b"REDACTED").decode()
    data = {key: hidden if key.startswith(SECRET_ENV_PREFIX) else value
            for key, value in doc.get("data", {}).items()}  # fmt: skip
    return {**doc, "data": data}


class TaskHost(Protocol):
    """The supervisor as the Kubernetes side sees it."""

    def record_end(
        self, task_id: str, run_id: str, info: ExitInfo | None, cancelled: bool, error: str | None
    ) -> TaskStatus | None: ...

    def announce(self, task_id: str, names: set[str] | None = None) -> None: ...

    def run_ended(self, task_id: str) -> None: ...


@dataclass
class KubeRun:
    task_id: str
    run_id: str
    task: str
    handle: Handle | None = None
    cancelling: bool = False
    supervision_fd: int | None = None
    stamp: tuple[tuple[int, int, int], ...] = ()
    records: tuple[str, ...] = ()  # the paths of RECORDS, joined once: read every poll

    def release(self) -> None:
        if self.supervision_fd is not None:
            os.close(self.supervision_fd)
            self.supervision_fd = None


def handle_record(handle: Handle) -> dict[str, Any]:
    return {"id": handle.id, "labels": dict(handle.labels), "data": dict(handle.data)}


def handle_of(record: dict[str, Any]) -> Handle | None:
    raw = record.get("handle")
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), dict):
        return None
    if not isinstance(raw.get("id"), str):
        return None
    return Handle(id=raw["id"], labels=dict(raw.get("labels") or {}), data=dict(raw["data"]))


class KubernetesTasks:
    """The task runs of one supervisor that run as Kubernetes Jobs, keyed by run id."""

    def __init__(
        self,
        settings: Settings,
        workspace: Workspace,
        registry: TaskRegistry,
        executor: Callable[[], KubernetesExecutor],
        host: TaskHost,
    ) -> None:
        assert settings.kubernetes is not None
        self.settings = settings
        self.workspace = workspace
        self.registry = registry
        self._executor = executor
        self._host = host
        self._runs: dict[str, KubeRun] = {}
        self._lock = threading.Lock()
        self._calls = ThreadPoolExecutor(4, thread_name_prefix="runyard-k8s-task")
        self._stopped = threading.Event()
        self._nudged = threading.Event()
        self._polling = threading.Lock()
        self._follower = threading.Thread(target=self._follow, name="runyard-k8s-tasks",
                                          daemon=True)  # fmt: skip
        self._follower.start()

    # -- queries ---------------------------------------------------------------------

    def has_slot(self) -> bool:
        assert self.settings.kubernetes is not None
        with self._lock:
            return len(self._runs) < self.settings.kubernetes.max_concurrent_tasks

    def count(self) -> int:
        with self._lock:
            return len(self._runs)

    def tracks(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._runs

    def nudge(self, run_id: str | None = None) -> None:
        """Read the Jobs now (the executor's watch saw a change)."""
        if run_id is None or self.tracks(run_id):
            self._nudged.set()

    # -- launch and adopt ------------------------------------------------------------

    def queue_mark(self, status: TaskStatus) -> None:
        """Mark the queued run of ``status`` as one for Kubernetes (before anything runs)."""
        mark(self.workspace, status.task_id, status.run_id)

    def launch(self, status: TaskStatus) -> None:
        """Track the run now and create its Job on a thread of the pool."""
        run = self._track(status)
        self._submit(self._launch, run)

    def _track(self, status: TaskStatus) -> KubeRun:
        with self._lock:
            run = self._runs.get(status.run_id)
            if run is None:
                run = KubeRun(status.task_id, status.run_id, status.task_name)
                self._runs[status.run_id] = run
        if run.supervision_fd is None:  # readers on this host leave it to us meanwhile
            run.supervision_fd = hold_supervision(supervision_path(self.workspace, run.task_id))
        return run

    def _launch(self, run: KubeRun) -> None:
        if run.cancelling:
            self._end(run, None, error=None)
            return
        try:
            executor = self._executor()
            status = self.workspace.read_status(run.task_id)
            if status is None or status.run_id != run.run_id or status.terminal:
                self._forget(run)
                return
            spec = task_launch_spec(
                self.settings, self.workspace, status, self.registry.get(run.task).target
            )
            options = run_options(self.settings, run.task, status)
            report = resources_report(spec, options.resources, self.settings)
            record_limits(self.workspace, run.task_id, run.run_id, report)
            handle = executor.launch(spec, options)
        except Exception as exc:  # any failure to launch is the run's end
            self._end(run, None, error=f"{type(exc).__name__}: {exc}")
            return
        run.handle = handle
        self._save(run)
        if run.cancelling:
            self._cancel_job(run)

    def adopt(self, status: TaskStatus, record: dict[str, Any]) -> bool:
        """Follow the run of ``status`` an earlier server launched; False when it must be
        launched (queued, and its Job never created)."""
        handle = handle_of(record)
        if handle is None and status.state is TaskState.QUEUED:
            return False  # launching it again adopts a Job whose create answer was lost
        run = self._track(status)
        if handle is not None:
            run.handle = handle
            self.nudge()
            return True
        self._submit(self._find, run)
        return True

    def _find(self, run: KubeRun) -> None:
        """A running task without a recorded handle: its Job, found by its labels, is
        adopted by launching again (a launch whose Job exists adopts it), else it ended."""
        try:
            jobs = self._executor().jobs(run.run_id)
        except ExecutorError as exc:
            log.warning("Cannot look for the Job of %s yet: %s", run.task_id, exc)
            time.sleep(POLL_SECONDS)
            self._submit(self._find, run)
            return
        if not jobs:
            self._end(run, None, error=f"Worker ended without a final status: {GONE}")
        else:
            self._launch(run)

    def collect(self) -> None:
        """Delete, on a thread of the pool, the Jobs of task runs that ended while no
        server followed them (their workers recorded the end), or were replaced."""
        self._submit(self._collect)

    def _collect(self) -> None:
        executor = self._executor()
        for job in executor.jobs():
            meta = job["metadata"]
            run_id = (meta.get("labels") or {}).get(RUN_ID_LABEL)
            task_id = (meta.get("annotations") or {}).get(TASK_ID_KEY)
            if task_id is None or run_id is None or self.tracks(run_id):
                continue  # an agent run's Job, or one followed here
            try:
                status = self.workspace.read_status(task_id)
            except (OSError, ValueError):
                continue
            if status is None or status.run_id != run_id or status.terminal:
                executor.discard(job)

    def _save(self, run: KubeRun) -> None:
        assert run.handle is not None
        try:
            mark(self.workspace, run.task_id, run.run_id, handle_record(run.handle))
        except OSError as exc:  # the Job is found by its labels after a restart anyway
            log.warning("Cannot record the Job of %s: %s", run.task_id, exc)

    # -- cancel ------------------------------------------------------------------------

    def cancel(self, task_id: str, run_id: str) -> bool:
        """Cancel the tracked run ``run_id``; False when it is not tracked or already is."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or run.cancelling or run.task_id != task_id:
                return False
            run.cancelling = True
        request_cancel(self.workspace, task_id, run_id)
        if run.handle is not None:
            self._submit(self._cancel_job, run)
        return True

    def _cancel_job(self, run: KubeRun) -> None:
        assert run.handle is not None
        try:
            self._executor().cancel(run.handle, self.settings.cancel_grace_seconds)
        except ExecutorError:
            log.exception("Cannot cancel %s", run.task_id)
        self.nudge()

    # -- following ---------------------------------------------------------------------

    def _follow(self) -> None:
        """Read the records of running tasks often, their Jobs less often (or when nudged)."""
        assert self.settings.kubernetes is not None
        every = self.settings.kubernetes.record_poll_seconds
        next_poll = 0.0
        while not self._stopped.is_set():
            self._read_records()
            now = time.monotonic()
            due = now >= next_poll or self._nudged.is_set()
            if due and self._polling.acquire(False):
                self._nudged.clear()
                next_poll = now + POLL_SECONDS
                self._submit(self._poll_all)
            elif due:  # a pass is under way: it reads the Jobs as they are now
                self._stopped.wait(BUSY_SECONDS)
            self._nudged.wait(min(every, POLL_SECONDS))  # a nudge wakes it at once

    def _read_records(self) -> None:
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            stamp = self._stamp(run)
            if stamp == run.stamp:
                continue
            names = {name for name, now, before in zip(RECORDS, stamp, run.stamp or (None,) * 2,
                                                        strict=True) if now != before}  # fmt: skip
            run.stamp = stamp
            if names:
                self._host.announce(run.task_id, names)

    def _stamp(self, run: KubeRun) -> tuple[tuple[int, int, int], ...]:
        """(inode, mtime, size) of each of :data:`RECORDS` (zeros when missing)."""
        if not run.records:
            task_dir = str(self.workspace.task_dir(run.task_id))
            run.records = tuple(os.path.join(task_dir, name) for name in RECORDS)
        stamp = []
        for path in run.records:
            try:
                info = os.stat(path)
            except OSError:
                stamp.append((0, 0, 0))
                continue
            stamp.append((info.st_ino, info.st_mtime_ns, info.st_size))
        return tuple(stamp)

    def _poll_all(self) -> None:
        try:
            with self._lock:
                runs = [run for run in self._runs.values() if run.handle is not None]
            if not runs:
                return
            executor = self._executor()
            for run in runs:
                if self._stopped.is_set():
                    return
                self._poll(executor, run)
        finally:
            self._polling.release()

    def _poll(self, executor: KubernetesExecutor, run: KubeRun) -> None:
        assert run.handle is not None
        try:
            info = executor.poll(run.handle)
        except ExecutorError as exc:
            log.warning("Cannot read the Job of %s: %s", run.task_id, exc)
            return
        if info is not None:
            self._save(run)  # the exit, kept with the handle: known again after a restart
            self._end(run, info, error=None)

    def _end(self, run: KubeRun, info: ExitInfo | None, error: str | None) -> None:
        """Record the end; once it is on record (or the run is no longer current), the Job
        goes and the run is forgotten here. Else it is tried again on the next poll."""
        status = self._host.record_end(run.task_id, run.run_id, info, run.cancelling, error)
        if status is not None and status.run_id == run.run_id and not status.terminal:
            return
        if run.handle is not None:
            try:
                self._executor().cleanup(run.handle)
            except Exception:  # the sweeper and the TTL remove it later
                log.exception("Cannot remove the Job of %s", run.task_id)
        self._forget(run)
        self._host.announce(run.task_id)
        self._host.run_ended(run.task_id)

    def _forget(self, run: KubeRun) -> None:
        with self._lock:
            if self._runs.get(run.run_id) is run:
                del self._runs[run.run_id]
        run.release()

    def _submit(self, work: Callable[..., None], *args: Any) -> None:
        try:
            self._calls.submit(self._guard, work, *args)
        except RuntimeError:  # closed: the next server adopts what is left
            if work == self._poll_all:
                self._polling.release()

    def _guard(self, work: Callable[..., None], *args: Any) -> None:
        try:
            work(*args)
        except Exception:
            log.exception("Kubernetes task work failed")

    def recorded(self, status: TaskStatus) -> dict[str, Any] | None:
        return read_mark(self.workspace, status.task_id, status.run_id)

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Stop following (the Jobs run on: the next server adopts them)."""
        self._stopped.set()
        self._nudged.set()
        self._calls.shutdown(wait=True, cancel_futures=True)
        self._follower.join(5.0)
        with self._lock:
            runs = list(self._runs.values())
            self._runs.clear()
        for run in runs:
            run.release()
