"""Which executor runs task workers: pre-forked when ``settings.prefork``, else plain processes."""

from __future__ import annotations

from typing import Protocol

from runyard.config import Settings
from runyard.executors.base import ExitInfo, Handle, LaunchSpec
from runyard.executors.local import LocalExecutor
from runyard.tasks.registry import TaskRegistry


class WorkerExecutor(Protocol):
    """The executor interface plus what a supervisor needs to reap and shut down."""

    name: str

    def launch(self, spec: LaunchSpec) -> Handle: ...

    def poll(self, handle: Handle) -> ExitInfo | None: ...

    def wait_exit(self, handle: Handle, timeout: float | None = None) -> ExitInfo | None: ...

    def cancel(self, handle: Handle, grace_seconds: float = 5.0) -> None: ...

    def cleanup(self, handle: Handle) -> None: ...

    def close(self) -> None: ...


def make_executor(settings: Settings, registry: TaskRegistry) -> WorkerExecutor:
    return LocalExecutor()
