"""Which executor runs task workers: pre-forked when ``settings.prefork``, else plain processes."""

from __future__ import annotations

import sys
from typing import Protocol

from runyard.config import Settings
from runyard.executors.base import ExitInfo, Handle, LaunchSpec
from runyard.executors.local import LocalExecutor
from runyard.executors.prefork import PreforkExecutor
from runyard.runtime.launch import WORKER_MODULE, base_env
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace

WARM_UP = "runyard.runtime.warmup:warm_worker"


class WorkerExecutor(Protocol):
    """The executor interface plus what a supervisor needs to reap and shut down."""

    name: str

    def launch(self, spec: LaunchSpec) -> Handle: ...

    def poll(self, handle: Handle) -> ExitInfo | None: ...

    def wait_exit(self, handle: Handle, timeout: float | None = None) -> ExitInfo | None: ...

    def cancel(self, handle: Handle, grace_seconds: float = 5.0) -> None: ...

    def cleanup(self, handle: Handle) -> None: ...

    def close(self) -> None: ...


def make_executor(
    settings: Settings, registry: TaskRegistry, workspace: Workspace
) -> WorkerExecutor:
    """A started executor for task workers.

    The pre-forked zygote preloads the worker and the built-in tasks, then runs the
    built-in demo task a few times (:mod:`runyard.runtime.warmup`), so the code every worker
    runs is specialised once, before it forks; plugin modules are imported by each forked
    worker (a plugin's import could start threads in the zygote, which would make forking
    it unsafe).
    """
    if not settings.prefork:
        return LocalExecutor()
    builtin = {
        task.target.partition(":")[0]
        for task in registry.tasks.values()
        if task.target.startswith("runyard.")
    }
    executor = PreforkExecutor(
        sys.executable, [WORKER_MODULE, *sorted(builtin)], base_env(settings),
        log_path=workspace.log_dir / "prefork.log", warm=WARM_UP,
    )
    executor.start()
    return executor
