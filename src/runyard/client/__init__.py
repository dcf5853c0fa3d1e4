"""Typed Python client of a runyard server, synchronous and asynchronous.

>>> with Client() as client:   # finds the server as `runyard` does; or Client(url, token)
...     handle = client.submit("demo", name="api-demo", x=1, y=2)
...     status = client.wait(handle, timeout=60)
...     for event in client.stream(handle.task_id):
...         print(event.kind)

``Client()`` finds the server and token from ``RUNYARD_URL``/``RUNYARD_TOKEN``, else the
``server.json`` of the workspace found by walking up from the current directory, else
the config (:func:`find_server`). ``client.agents`` reaches sessions, uploads and runs.
``AsyncClient`` has the same methods as coroutines (``agents`` included) and ``stream`` as
an async iterator.
Failures raise :class:`runyard.errors.ClientError` and its subclasses.

Importing this package loads neither the server, the runtime nor the web stack: the
answers are the wire models of :mod:`runyard.wire`. Its names load on first use, so
``runyard.client.discovery`` (how the server and workspace are found) costs no HTTP client
and no models.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker sees; at run time each name loads on first use
    from runyard.client.agent_models import (
        AgentPackage,
        Artifact,
        Checkpoint,
        HistoryEntry,
        MountGrant,
        OutputFile,
        Run,
        Session,
    )
    from runyard.client.agents import AgentsClient
    from runyard.client.aio import AsyncClient
    from runyard.client.aio_agents import AsyncAgentsClient
    from runyard.client.discovery import ServerLocation, find_server
    from runyard.client.events import LogEvent, ProgressEvent, ResultEvent, StreamEvent
    from runyard.client.pages import Page
    from runyard.client.sync import Client
    from runyard.wire import (
        TaskDefinition,
        TaskFile,
        TaskHandle,
        TaskLogChunk,
        TaskRunEntry,
        TaskRuns,
        TaskState,
        TaskStatus,
    )

__all__ = [
    "AgentPackage",
    "AgentsClient",
    "Artifact",
    "AsyncAgentsClient",
    "AsyncClient",
    "Checkpoint",
    "Client",
    "HistoryEntry",
    "LogEvent",
    "MountGrant",
    "OutputFile",
    "Page",
    "ProgressEvent",
    "ResultEvent",
    "Run",
    "ServerLocation",
    "Session",
    "StreamEvent",
    "TaskDefinition",
    "TaskFile",
    "TaskHandle",
    "TaskLogChunk",
    "TaskRunEntry",
    "TaskRuns",
    "TaskState",
    "TaskStatus",
    "find_server",
]

_WHERE = {
    "AgentPackage": "runyard.client.agent_models",
    "Checkpoint": "runyard.client.agent_models",
    "MountGrant": "runyard.client.agent_models",
    "AgentsClient": "runyard.client.agents",
    "Artifact": "runyard.client.agent_models",
    "AsyncAgentsClient": "runyard.client.aio_agents",
    "AsyncClient": "runyard.client.aio",
    "Client": "runyard.client.sync",
    "HistoryEntry": "runyard.client.agent_models",
    "LogEvent": "runyard.client.events",
    "OutputFile": "runyard.client.agent_models",
    "Page": "runyard.client.pages",
    "ProgressEvent": "runyard.client.events",
    "ResultEvent": "runyard.client.events",
    "Run": "runyard.client.agent_models",
    "ServerLocation": "runyard.client.discovery",
    "Session": "runyard.client.agent_models",
    "StreamEvent": "runyard.client.events",
    "TaskDefinition": "runyard.wire",
    "TaskFile": "runyard.wire",
    "TaskHandle": "runyard.wire",
    "TaskLogChunk": "runyard.wire",
    "TaskRunEntry": "runyard.wire",
    "TaskRuns": "runyard.wire",
    "TaskState": "runyard.wire",
    "TaskStatus": "runyard.wire",
    "find_server": "runyard.client.discovery",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(import_module(_WHERE[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'runyard.client' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
