"""The executor interface: how a worker (a task or an agent run) is started and controlled.

One interface serves tasks and agent runs::

    spec = LaunchSpec(argv=["python", "-m", "runyard.runtime.worker"], stdin=b"{...}",
                      log_path=Path("logs/base/x/run.log"), cwd=Path("/ws/base/x"))
    handle = executor.launch(spec)
    executor.poll(handle)      # None while running, else an ExitInfo
    executor.cancel(handle)    # SIGTERM to the group, SIGKILL after the grace period
    executor.cleanup(handle)   # release what the launch held (fds, pods, config maps)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class Mount:
    """A host folder made visible to the worker at ``target`` (e.g. ``/workspace/in``)."""

    host_path: Path
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class Limits:
    """Hard limits of one launch; ``None`` leaves that resource unlimited."""

    cpu: float | None = None
    memory_bytes: int | None = None
    timeout_seconds: float | None = None
    pids: int | None = None


@dataclass(frozen=True)
class LaunchSpec:
    """What to run. Inputs travel in ``stdin`` or files, never on ``argv``."""

    argv: list[str]
    log_path: Path
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes = b""
    mounts: list[Mount] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    network: bool = True


@dataclass(frozen=True)
class ExitInfo:
    """How a worker ended: ``exit_code`` (negative: killed by that signal)."""

    exit_code: int

    @property
    def signal(self) -> int | None:
        return -self.exit_code if self.exit_code < 0 else None

    def describe(self) -> str:
        if self.signal is not None:
            return f"killed by signal {self.signal}"
        return f"exit code {self.exit_code}"


@dataclass
class Handle:
    """A launched worker. ``pid`` is the process (group leader) for local executors."""

    id: str
    pid: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)


class Executor(Protocol):
    name: str

    def launch(self, spec: LaunchSpec) -> Handle: ...

    def poll(self, handle: Handle) -> ExitInfo | None: ...

    def cancel(self, handle: Handle, grace_seconds: float = 5.0) -> None: ...

    def cleanup(self, handle: Handle) -> None: ...
