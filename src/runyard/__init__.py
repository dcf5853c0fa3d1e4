"""runyard: a self-hosted runtime for research tasks and AI-agent runs.

The public names load lazily, so a worker process that imports ``runyard.runtime`` does
not pay for the HTTP client or the web stack.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = [
    "AsyncClient",
    "Client",
    "Pipeline",
    "RunyardError",
    "Settings",
    "Task",
    "TaskInput",
    "TaskOutput",
    "TaskRun",
    "TaskState",
    "TaskStatus",
    "TaskType",
    "Workspace",
]

_WHERE = {
    "AsyncClient": "runyard.client",
    "Client": "runyard.client",
    "Pipeline": "runyard.pipelines.build",
    "RunyardError": "runyard.errors",
    "Settings": "runyard.config",
    "Task": "runyard.tasks.base",
    "TaskInput": "runyard.tasks.base",
    "TaskOutput": "runyard.tasks.base",
    "TaskRun": "runyard.tasks.base",
    "TaskState": "runyard.workspace.records",
    "TaskStatus": "runyard.workspace.records",
    "TaskType": "runyard.workspace.identity",
    "Workspace": "runyard.workspace.layout",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'runyard' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
