"""A task run's worker process as the supervisor holds it: what to launch, which process
it is, how it ended and how it is stopped.

    spec = worker_launch_spec(settings, workspace, registry, status, scope, sandbox_problem)
    act = ActiveRun(task_id, run_id, handle.pid, None, handle, executor)   # launched here
    ref = worker_ref(workspace, status)          # or a live worker started elsewhere
    act.terminate(grace)                          # the whole group, then its cgroup
    act.exit_info(pidfd)                          # the exit, once the monitor saw it end

A worker launched here is known by its executor handle; an adopted one only by its pid and
start time (so a recycled pid is never taken for it, see :mod:`runyard.executors.pidwatch`).
A sandboxed worker is known by the server's record of its sandbox process, never by the
pid its lock file names (a pid of the sandbox's namespace, and writable by the task).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runyard.config import Settings
from runyard.errors import ExecutorError, Forbidden
from runyard.executors.base import ExitInfo, Handle, LaunchSpec
from runyard.executors.containment import sweep, task_cgroup_name
from runyard.executors.local import terminate_group
from runyard.executors.pidwatch import process_start_time
from runyard.runtime.executor import WorkerExecutor
from runyard.runtime.launch import worker_spec
from runyard.runtime.reconcile import WorkerRef, live_worker
from runyard.runtime.sandboxed import prepare_sandbox_dir, sandboxed_worker_spec
from runyard.runtime.submitters import (
    launch_scope,
    record_sandbox_process,
    sandbox_process,
    trusted_log_path,
)
from runyard.runtime.workerlock import lock_held
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskStatus

log = logging.getLogger(__name__)


@dataclass
class ActiveRun:
    """A run with a worker process we watch (``handle`` None: adopted, not launched by us)."""

    task_id: str
    run_id: str
    pid: int
    start_time: int | None
    handle: Handle | None = None
    executor: WorkerExecutor | None = None
    cancelling: bool = False
    ended: ExitInfo | None = None
    supervision_fd: int | None = None
    rechecks: int = 0
    # the session whose agent run submitted it: its slot counts against agent_task_slots
    owner: str | None = None
    failure: str | None = None  # why the server stopped it (its run's disk quota), if it did

    def release(self) -> None:
        """Let go of the supervision lock held for the run."""
        if self.supervision_fd is not None:
            os.close(self.supervision_fd)
            self.supervision_fd = None

    def exit_info(self, pidfd: int | None) -> ExitInfo | None:
        """How the worker ended (None: unknown, an adopted worker that is not our child)."""
        if self.ended is None and self.handle is not None and self.executor is not None:
            self.ended = self.executor.wait_exit(self.handle, 2.0)
        elif self.ended is None:
            self.ended = reap_adopted(pidfd)
        return self.ended

    def terminate(self, grace: float) -> None:
        """SIGTERM the worker's group, SIGKILL it after ``grace``; then its cgroup."""
        try:
            if self.handle is not None and self.executor is not None:
                self.executor.cancel(self.handle, grace)
            else:
                terminate_group(self.pid, grace, self.start_time)
                sweep(task_cgroup_name(self.run_id))
        except ExecutorError:
            log.exception("Cannot cancel %s", self.task_id)


def launched(
    workspace: Workspace,
    status: TaskStatus,
    handle: Handle,
    executor: WorkerExecutor,
    sandboxed: bool,
    supervision_fd: int | None,
) -> ActiveRun:
    """The run of a worker just launched here; a sandboxed one's process is recorded (pid
    and start time), as it is the only trustworthy way to find it again after a restart."""
    if handle.pid is None:
        raise ExecutorError(f"Handle {handle.id} has no process")
    if sandboxed:
        start = process_start_time(handle.pid)
        record_sandbox_process(workspace, status.task_id, handle.pid, start)
    return ActiveRun(
        status.task_id, status.run_id, handle.pid, None, handle, executor,
        supervision_fd=supervision_fd,
    )  # fmt: skip


def reap_adopted(pidfd: int | None) -> ExitInfo | None:
    """The exit of an adopted worker if it happens to be our child (else unknown)."""
    if pidfd is None:
        return None
    try:
        result = os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG)
    except (ChildProcessError, OSError):
        return None
    if result is None:
        return None
    if result.si_code == os.CLD_EXITED:
        return ExitInfo(result.si_status)
    return ExitInfo(-result.si_status)


def worker_ref(workspace: Workspace, status: TaskStatus) -> WorkerRef | None:
    """The process to watch and signal for a live worker of ``status``.

    A sandboxed worker's lock file names a PID of its own namespace, and the task may
    have rewritten it: the server's record of the sandbox process is used instead.
    """
    if launch_scope(workspace, status) is None:
        return live_worker(workspace, status)
    recorded = sandbox_process(workspace, status.task_id)
    if recorded is None or not lock_held(workspace.lock_path(status.task_id)):
        return None
    return WorkerRef(*recorded)


def worker_launch_spec(
    settings: Settings,
    workspace: Workspace,
    registry: TaskRegistry,
    status: TaskStatus,
    scope: dict[str, str] | None,
    sandbox_problem: Callable[[], str | None],
) -> LaunchSpec:
    """The admin worker as before; a run-submitted one (``scope``) only ever inside its
    sandbox (:class:`Forbidden` when ``sandbox_problem()`` says there is none here)."""
    target = registry.get(status.task_name).target
    if scope is None:
        return worker_spec(settings, workspace, status, target)
    problem = sandbox_problem()
    if problem is not None:
        raise Forbidden(f"A task submitted by an agent run needs a sandbox: {problem}")
    prepare_sandbox_dir(settings, workspace.task_dir(status.task_id), status)
    log_path = Path(trusted_log_path(workspace, status))
    return sandboxed_worker_spec(
        settings, workspace, status, target, scope.get("session_id", ""), log_path
    )
