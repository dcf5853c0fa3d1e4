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
answers are the wire models of :mod:`runyard.wire`.
"""

from __future__ import annotations

from runyard.client.agent_models import Artifact, HistoryEntry, OutputFile, Run, Session
from runyard.client.agents import AgentsClient
from runyard.client.aio import AsyncClient
from runyard.client.aio_agents import AsyncAgentsClient
from runyard.client.discovery import ServerLocation, find_server
from runyard.client.events import LogEvent, ProgressEvent, ResultEvent, StreamEvent
from runyard.client.pages import Page
from runyard.client.sync import Client
from runyard.wire import TaskDefinition, TaskHandle, TaskLogChunk, TaskState, TaskStatus

__all__ = [
    "AgentsClient",
    "Artifact",
    "AsyncAgentsClient",
    "AsyncClient",
    "Client",
    "HistoryEntry",
    "LogEvent",
    "OutputFile",
    "Page",
    "ProgressEvent",
    "ResultEvent",
    "Run",
    "ServerLocation",
    "Session",
    "StreamEvent",
    "TaskDefinition",
    "TaskHandle",
    "TaskLogChunk",
    "TaskState",
    "TaskStatus",
    "find_server",
]
