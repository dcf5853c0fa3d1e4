"""Typed Python client of the Task Job API, synchronous and asynchronous.

>>> with Client.from_workspace(".runyard") as client:  # or Client("http://…", token)
...     handle = client.submit("demo", task_name="api-demo", x=1, y=2)
...     status = client.wait_task(handle.task_id, handle.run_id)
...     for event in client.stream(handle.task_id):
...         print(event.kind)

``from_workspace`` finds the server a workspace's ``server.json`` records and signs in with
the token recorded there (readable by the server's own user only).
``AsyncClient`` has the same methods as coroutines and ``stream`` as an async iterator.
Failures map to :class:`runyard.errors.ClientError` and its subclasses.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter

from runyard.api.address import SERVER_FILE, read_server_record
from runyard.errors import (
    HTTPError,
    JobFailed,
    NotFound,
    PayloadTooLarge,
    RequestInvalid,
    ServerUnreachable,
    Unauthorized,
)
from runyard.repository.models import TaskContext, TaskGraph
from runyard.runtime.supervisor import TaskHandle
from runyard.tasks.base import TaskDefinition
from runyard.workspace.logs import TaskLogChunk
from runyard.workspace.records import TaskStatus

__all__ = ["AsyncClient", "Client", "LogEvent", "ProgressEvent", "ResultEvent"]

T = TypeVar("T")
STATUS_ERRORS = {401: Unauthorized, 404: NotFound, 413: PayloadTooLarge, 422: RequestInvalid}
MAX_RESUMES = 20
IDEMPOTENCY_HEADER = "Idempotency-Key"
KEYED_ATTEMPTS = 4  # a keyed submit is sent again after a lost connection, then gives up
RETRY_PAUSE = 0.25


class ProgressEvent(BaseModel):
    kind: Literal["progress"] = "progress"
    id: int | None = None
    name: str
    started_at: str | None = None
    finished_at: str | None = None
    percentage: float = 0.0


class LogEvent(BaseModel):
    kind: Literal["log"] = "log"
    id: int | None = None
    chunk: TaskLogChunk


class ResultEvent(BaseModel):
    kind: Literal["result"] = "result"
    id: int | None = None
    success: bool
    answer: Any
    status: TaskStatus | None = None


StreamEvent = ProgressEvent | LogEvent | ResultEvent


@dataclass
class JobCall(Generic[T]):
    name: str
    arguments: dict[str, Any]
    answer: Any  # a type TypeAdapter understands
    status_on_failure: bool = False  # wait_task/stream_task answer a TaskStatus on failure
    # an Idempotency-Key: the call may be sent again when its answer was lost
    key: str | None = None

    def headers(self) -> dict[str, str]:
        return {IDEMPOTENCY_HEADER: self.key} if self.key else {}

    def parse(self, reply: httpx.Response) -> T:
        body = _checked_json(reply)
        answer = body.get("answer")
        if not body.get("success") and not (self.status_on_failure and isinstance(answer, dict)):
            raise JobFailed(self.name, str(answer))
        return TypeAdapter(self.answer).validate_python(answer)


def _checked_json(reply: httpx.Response) -> dict[str, Any]:
    if reply.status_code != 200:
        try:
            detail = reply.json().get("detail", reply.text)
        except ValueError:
            detail = reply.text
        raise STATUS_ERRORS.get(reply.status_code, HTTPError)(reply.status_code, detail)
    return reply.json()


def _without_none(**arguments: Any) -> dict[str, Any]:
    return {key: value for key, value in arguments.items() if value is not None}


class _JobMethods(ABC):
    """One typed method per job; ``_execute`` is sync in Client and a coroutine in AsyncClient."""

    @abstractmethod
    def _execute(self, call: JobCall[Any]) -> Any:
        """Send the call and parse its answer."""

    def list_installed_task_definitions(self) -> list[TaskDefinition]:
        return self._execute(JobCall("list_installed_task_definitions", {}, list[TaskDefinition]))

    def get_task_definition(self, task: str) -> TaskDefinition:
        return self._execute(JobCall("get_task_definition", {"task": task}, TaskDefinition))

    def submit(self, task: str, **inputs: Any) -> TaskHandle:
        """Queue a run; sent with a fresh Idempotency-Key and retried on a lost connection,
        so a retry answers the first submit's handle and never runs the task twice."""
        args = {"task": task, **inputs}
        return self._execute(JobCall("submit", args, TaskHandle, key=uuid.uuid4().hex))

    def wait_task(self, task_id: str, run_id: str, poll_interval: float = 1.0) -> TaskStatus:
        args = {"task_id": task_id, "run_id": run_id, "poll_interval": poll_interval}
        return self._execute(JobCall("wait_task", args, TaskStatus, status_on_failure=True))

    def list_task_ids(self) -> list[str]:
        return self._execute(JobCall("list_task_ids", {}, list[str]))

    def list_task_statuses(
        self,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        state: str | None = None,
        task_type: str | None = None,
        text: str | None = None,
    ) -> list[TaskStatus]:
        args = _without_none(
            limit=limit, cursor=cursor, state=state, task_type=task_type, text=text
        )
        return self._execute(JobCall("list_task_statuses", args, list[TaskStatus]))

    def status(self, task_id: str) -> TaskStatus:
        return self._execute(JobCall("status", {"task_id": task_id}, TaskStatus))

    def read_task_log(self, task_id: str, offset: int = -1, limit: int = 65536) -> TaskLogChunk:
        args = {"task_id": task_id, "offset": offset, "limit": limit}
        return self._execute(JobCall("read_task_log", args, TaskLogChunk))

    def stream_task(self, task_id: str, poll_interval: float = 0.5) -> TaskStatus:
        args = {"task_id": task_id, "poll_interval": poll_interval}
        return self._execute(JobCall("stream_task", args, TaskStatus, status_on_failure=True))

    def get_task_graph(self, task_id: str) -> TaskGraph:
        return self._execute(JobCall("get_task_graph", {"task_id": task_id}, TaskGraph))

    def get_task_context(self, task_id: str) -> TaskContext:
        return self._execute(JobCall("get_task_context", {"task_id": task_id}, TaskContext))

    def cancel(self, task_id: str) -> bool:
        return self._execute(JobCall("cancel", {"task_id": task_id}, bool))

    def delete_tasks(self, task_ids: list[str]) -> list[str]:
        return self._execute(JobCall("delete_tasks", {"task_ids": task_ids}, list[str]))


def _recorded_server(path: str | os.PathLike[str]) -> tuple[str, str | None]:
    """(url, token) from ``<path>/server.json``, or ``<path>/.runyard/server.json``."""
    folder = Path(path)
    if not (folder / SERVER_FILE).exists() and (folder / ".runyard" / SERVER_FILE).exists():
        folder = folder / ".runyard"
    info = read_server_record(folder)
    if info is None:
        raise ServerUnreachable(str(folder), f"no running server recorded in {SERVER_FILE}")
    return info["url"], info["token"]


def _attempts(call: JobCall[Any]) -> int:
    """Only a call with an Idempotency-Key is safe to send again after a lost answer."""
    return KEYED_ATTEMPTS if call.key else 1


def _headers(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


def _post(call: JobCall[Any], target: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"arguments": call.arguments}
    if target:
        body["target"] = target
    return body


def _stream_body(task_id: str, poll_interval: float, target: str | None) -> dict[str, Any]:
    call: JobCall[None] = JobCall(
        "stream_task", {"task_id": task_id, "poll_interval": poll_interval}, None
    )
    return _post(call, target)


@dataclass
class _SSEParser:
    """Turns SSE lines into typed events and remembers the last id for resuming."""

    last_id: str | None = None
    _fields: dict[str, str] = field(default_factory=dict)

    def feed(self, line: str) -> StreamEvent | None:
        if line:
            if not line.startswith(":"):
                name, _, value = line.partition(":")
                self._fields[name] = value[1:] if value.startswith(" ") else value
            return None
        fields, self._fields = self._fields, {}
        if "data" not in fields:
            return None
        if "id" in fields:
            self.last_id = fields["id"]
        return _typed_event(fields.get("event", "message"), fields)


def _typed_event(kind: str, fields: dict[str, str]) -> StreamEvent | None:
    data = json.loads(fields["data"])
    event_id = int(fields["id"]) if fields.get("id", "").isdigit() else None
    if kind == "progress":
        return ProgressEvent.model_validate({**data, "kind": "progress", "id": event_id})
    if kind == "log":
        return LogEvent(id=event_id, chunk=TaskLogChunk.model_validate(data))
    if kind == "result":
        answer = data.get("answer")
        status = TaskStatus.model_validate(answer) if isinstance(answer, dict) else None
        return ResultEvent(id=event_id, success=data["success"], answer=answer, status=status)
    return None


class Client(_JobMethods):
    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        target: str | None = None,
        timeout: float | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.target = target
        self._http = httpx.Client(
            base_url=self.url,
            headers=_headers(token),
            timeout=httpx.Timeout(timeout, connect=10.0),
            transport=transport,
        )

    @classmethod
    def from_workspace(cls, path: str | os.PathLike[str] = ".", **options: Any) -> Client:
        """A client of the server running on the workspace at ``path`` (or ``path/.runyard``),
        with the token it recorded; ``options`` as for the constructor."""
        return cls(*_recorded_server(path), **options)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def health(self) -> bool:
        try:
            return self._http.get("/health").status_code == 200
        except httpx.HTTPError:
            return False

    def _execute(self, call: JobCall[Any]) -> Any:
        body, headers = _post(call, self.target), call.headers()
        for attempt in range(_attempts(call)):
            try:
                reply = self._http.post(f"/jobs/{call.name}", json=body, headers=headers)
                return call.parse(reply)
            except httpx.TransportError as exc:
                if attempt + 1 >= _attempts(call):
                    raise ServerUnreachable(self.url, repr(exc)) from exc
                time.sleep(RETRY_PAUSE * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def stream(self, task_id: str, poll_interval: float = 0.5) -> Iterator[StreamEvent]:
        """Progress, log and result events; reconnects with Last-Event-ID if cut off."""
        parser = _SSEParser()
        body = _stream_body(task_id, poll_interval, self.target)
        for _ in range(MAX_RESUMES):
            headers = {"last-event-id": parser.last_id} if parser.last_id else {}
            try:
                with self._http.stream(
                    "POST", "/jobs/stream_task/events", json=body,
                    headers=headers,
                ) as reply:  # fmt: skip
                    if reply.status_code != 200:
                        reply.read()
                        _checked_json(reply)
                    for line in reply.iter_lines():
                        event = parser.feed(line)
                        if event is not None:
                            yield event
                            if isinstance(event, ResultEvent):
                                return
            except httpx.TransportError as exc:
                if parser.last_id is None:
                    raise ServerUnreachable(self.url, repr(exc)) from exc
        raise ServerUnreachable(self.url, "stream kept breaking off")


class AsyncClient(_JobMethods):
    """The same methods as :class:`Client`, each returning a coroutine."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        target: str | None = None,
        timeout: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.target = target
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers=_headers(token),
            timeout=httpx.Timeout(timeout, connect=10.0),
            transport=transport,
        )

    @classmethod
    def from_workspace(cls, path: str | os.PathLike[str] = ".", **options: Any) -> AsyncClient:
        """As :meth:`Client.from_workspace`."""
        return cls(*_recorded_server(path), **options)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def health(self) -> bool:
        try:
            return (await self._http.get("/health")).status_code == 200
        except httpx.HTTPError:
            return False

    async def _execute(self, call: JobCall[Any]) -> Any:
        body, headers = _post(call, self.target), call.headers()
        for attempt in range(_attempts(call)):
            try:
                reply = await self._http.post(f"/jobs/{call.name}", json=body, headers=headers)
                return call.parse(reply)
            except httpx.TransportError as exc:
                if attempt + 1 >= _attempts(call):
                    raise ServerUnreachable(self.url, repr(exc)) from exc
                await asyncio.sleep(RETRY_PAUSE * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def stream(self, task_id: str, poll_interval: float = 0.5) -> AsyncIterator[StreamEvent]:
        parser = _SSEParser()
        body = _stream_body(task_id, poll_interval, self.target)
        for _ in range(MAX_RESUMES):
            headers = {"last-event-id": parser.last_id} if parser.last_id else {}
            try:
                async with self._http.stream(
                    "POST", "/jobs/stream_task/events", json=body,
                    headers=headers,
                ) as reply:  # fmt: skip
                    if reply.status_code != 200:
                        await reply.aread()
                        _checked_json(reply)
                    async for line in reply.aiter_lines():
                        event = parser.feed(line)
                        if event is not None:
                            yield event
                            if isinstance(event, ResultEvent):
                                return
            except httpx.TransportError as exc:
                if parser.last_id is None:
                    raise ServerUnreachable(self.url, repr(exc)) from exc
        raise ServerUnreachable(self.url, "stream kept breaking off")
