"""How a worker is launched: its environment, its launch spec, and ``run_task`` for the CLI.

    handle = run_task(settings, workspace, registry, "demo", {"x": 1, "y": 2})
    final = wait_for_run(workspace, handle.task_id, handle.run_id)

A worker gets this process's environment (``task_env: inherit``, the default) or only the
variables named in ``settings.env_allowlist`` (``task_env: strict``), then
``settings.worker_env``, minus runyard's own secrets (``runtime/environment.py``), then
``RUNYARD_TASK_ID``, ``RUNYARD_RUN_ID`` and ``RUNYARD_TASK_DIR``; it runs under
``settings.task_limits`` (recorded in its status as ``limits``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from runyard.config import Settings
from runyard.errors import ExecutorError
from runyard.executors.base import Handle, LaunchSpec
from runyard.executors.containment import planned_limits, to_limits
from runyard.executors.local import LocalExecutor
from runyard.runtime.creation import create_task
from runyard.runtime.environment import task_environment
from runyard.runtime.liveness import end_dead_run, record_limits, supervision_path
from runyard.runtime.worker import WorkerPayload
from runyard.runtime.workerlock import hold_supervision
from runyard.tasks.registry import TaskRegistry
from runyard.wire import TaskHandle  # a wire model, shared with the light client
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskStatus

WORKER_MODULE = "runyard.runtime.worker"
log = logging.getLogger(__name__)


def base_env(settings: Settings) -> dict[str, str]:
    """What a plain task gets of this process's environment (see ``task_environment``)."""
    return task_environment(settings)


def worker_spec(
    settings: Settings, workspace: Workspace, status: TaskStatus, target: str
) -> LaunchSpec:
    """The launch spec of the worker for ``status`` (a ``queued`` run) of task ``target``."""
    task_dir = workspace.task_dir(status.task_id)
    payload = WorkerPayload(
        workspace=str(workspace.root), log_dir=str(workspace.log_dir),
        task_id=status.task_id, run_id=status.run_id, target=target,
    )
    env = base_env(settings)
    env.update(
        RUNYARD_TASK_ID=status.task_id, RUNYARD_RUN_ID=status.run_id,
        RUNYARD_TASK_DIR=str(task_dir),
    )
    return LaunchSpec(
        argv=[sys.executable, "-m", WORKER_MODULE],
        log_path=Path(
            os.path.abspath(workspace.run_log_path(status.task_id, status.run_id))
        ),
        cwd=task_dir,
        env=env,
        stdin=payload.dump(),
        labels={"runyard.task_id": status.task_id, "runyard.run_id": status.run_id},
        limits=to_limits(settings.task_limits),
    )


def run_task(
    settings: Settings,
    workspace: Workspace,
    registry: TaskRegistry,
    task: str,
    inputs: dict[str, Any],
    *,
    detach: bool = False,
) -> TaskHandle:
    """Create the records and launch the worker at once (no queue, no server).

    With ``detach=False`` the caller is expected to wait (``wait_for_run``): a thread of
    this process reaps the worker and, if it died without a final status, records its
    exact exit code or signal. With ``detach=True`` nothing here watches it; it runs on
    after the caller exits, and whoever reads it next settles it.
    """
    status = create_task(workspace, registry, task, inputs)
    target = registry.get(task).target
    executor = LocalExecutor()
    supervision = None if detach else hold_supervision(supervision_path(workspace, status.task_id))
    spec = worker_spec(settings, workspace, status, target)
    record_limits(workspace, status.task_id, status.run_id, planned_limits(executor, spec))
    try:
        handle = executor.launch(spec)
    except ExecutorError as exc:
        _release(supervision)
        end_dead_run(workspace, status.task_id, status.run_id, error=f"ExecutorError: {exc}")
        raise
    if not detach:
        _reap_in_background(executor, handle, workspace, status, supervision)
    return TaskHandle(task_id=status.task_id, run_id=status.run_id, task=task)


def _reap_in_background(
    executor: LocalExecutor,
    handle: Handle,
    workspace: Workspace,
    status: TaskStatus,
    supervision: int | None,
) -> None:
    def reap() -> None:
        info = executor.wait_exit(handle)
        try:
            end_dead_run(workspace, status.task_id, status.run_id, info)
        except OSError:
            log.exception("Cannot record the end of %s", status.task_id)
        finally:
            _release(supervision)

    reaper = threading.Thread(target=reap, name=f"reap-{handle.pid}", daemon=True)
    _reapers.append(reaper)
    reaper.start()


_reapers: list[threading.Thread] = []


def wait_reaped(timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for the reapers of this process's runs to finish:
    a command that exits as soon as the final status is written would stop them half-way,
    before the worker's cgroup is emptied and removed. False if one is still at work."""
    deadline = time.monotonic() + timeout
    for reaper in list(_reapers):
        reaper.join(max(0.0, deadline - time.monotonic()))
    _reapers[:] = [reaper for reaper in _reapers if reaper.is_alive()]
    return not _reapers


def _release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)
