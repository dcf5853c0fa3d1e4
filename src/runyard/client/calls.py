"""The Job API calls the clients send: one builder per job, and the parsing of answers.

A :class:`JobCall` names its job, its arguments and the type of its answer. The sync and
the async client send the same calls; only the transport differs, so every rule of the
protocol (errors, retries, pages) is written here once, or in :mod:`runyard.client.answers`
where the light reader of :mod:`runyard.client.plain` shares it.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx
from pydantic import TypeAdapter

from runyard.client.answers import Reply, checked_json, os_reason, task_list_body
from runyard.client.pages import Page
from runyard.errors import JobFailed, ServerUnreachable, WaitTimeout
from runyard.wire import (
    TaskContext,
    TaskDefinition,
    TaskGraph,
    TaskHandle,
    TaskLogChunk,
    TaskStatus,
)

T = TypeVar("T")
IDEMPOTENCY_HEADER = "Idempotency-Key"
KEYED_ATTEMPTS = 4  # a keyed submit is sent again after a lost connection, then gives up
RETRY_PAUSE = 0.25
JOB_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")  # the jobs' names: never a path or a query


def unreachable(url: str, exc: httpx.TransportError) -> ServerUnreachable:
    """The error for a request that never got an answer, with its reason in plain words:
    httpx's own messages carry errno numbers and class names."""
    return ServerUnreachable(url, transport_reason(exc))


def transport_reason(exc: httpx.TransportError) -> str:
    """Why a connection failed, as a few words (``connection refused``)."""
    if isinstance(exc, httpx.TimeoutException):
        return "no answer in time"
    said = os_reason(exc)
    if said is not None:
        return said
    if isinstance(exc, httpx.ConnectError):
        return "could not connect"
    if isinstance(exc, httpx.UnsupportedProtocol):
        return "the address is not an http:// or https:// URL"
    return "the connection broke off"


LIST_PAGE_SIZE = 100


@functools.lru_cache(maxsize=64)
def adapter(answer: Any) -> TypeAdapter[Any]:
    """The validator of one answer type, made once: making a ``TypeAdapter`` for every
    answer cost about as much as validating the answer."""
    return TypeAdapter(answer)


@dataclass
class JobCall(Generic[T]):
    """One job: ``POST /jobs/{name}`` with ``{"arguments": ...}``, answering ``answer``."""

    name: str
    arguments: dict[str, Any]
    answer: Any  # a type TypeAdapter understands
    status_on_failure: bool = False  # wait_task/stream_task answer a TaskStatus on failure
    # an Idempotency-Key: the call may be sent again when its answer was lost
    key: str | None = None
    paged: bool = False  # the answer is a list and metadata.next_cursor its continuation
    timeout: float | None = None  # seconds to wait for the answer; None: the client's own

    def headers(self) -> dict[str, str]:
        return {IDEMPOTENCY_HEADER: self.key} if self.key else {}

    def attempts(self) -> int:
        """Only a call with an Idempotency-Key is safe to send again after a lost answer."""
        return KEYED_ATTEMPTS if self.key else 1

    def timed_out(self) -> WaitTimeout:
        """The error of this call ended by its own ``timeout`` (the task goes on)."""
        return WaitTimeout(f"Task {self.arguments.get('task_id')}", self.timeout or 0.0)

    def body(self, target: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"arguments": self.arguments}
        if target:
            body["target"] = target
        return body

    def parse(self, reply: Reply) -> T:
        body = checked_json(reply)
        answer = body.get("answer")
        if not body.get("success") and not (self.status_on_failure and isinstance(answer, dict)):
            raise JobFailed(self.name, str(answer))
        value = adapter(self.answer).validate_python(answer)
        if self.paged:
            metadata = body.get("metadata") or {}
            return Page(value, next_cursor=metadata.get("next_cursor"))  # type: ignore[return-value]
        return value


def json_body(body: dict[str, Any]) -> bytes:
    """``body`` as httpx's ``json=`` sends it (a NaN is refused with ``ValueError``)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def without_none(**arguments: Any) -> dict[str, Any]:
    return {key: value for key, value in arguments.items() if value is not None}


def submit_arguments(
    task: str, name: str | None, sources: str | Iterable[str], fields: dict[str, Any]
) -> dict[str, Any]:
    """The submit arguments: ``name`` is the fixed ``task_name``, ``sources`` the upstream
    task ids (``source_tasks``, comma-joined); ``task_name=`` in ``fields`` is still taken."""
    alias = fields.pop("task_name", None)
    if name is not None and alias is not None and name != alias:
        raise TypeError("submit() got both name= and task_name=; use name=")
    name = name if name is not None else alias
    upstream = sources if isinstance(sources, str) else ",".join(sources)
    arguments: dict[str, Any] = {"task": task, **fields}
    if name is not None:
        arguments["task_name"] = name
    if upstream:
        arguments["source_tasks"] = upstream
    return arguments


def list_statuses_call(
    limit: int | None,
    cursor: str | None,
    state: str | None,
    task_type: str | None,
    text: str | None,
) -> JobCall[Page[TaskStatus]]:
    args = without_none(limit=limit, cursor=cursor, state=state, task_type=task_type, text=text)
    return JobCall("list_task_statuses", args, list[TaskStatus], paged=True)


def task_list_page(body: dict[str, Any]) -> Page[TaskStatus]:
    """A page of ``GET /api/v1/tasks``, with its ``next_cursor`` and ``total``."""
    items, next_cursor, total = task_list_body(body)
    return Page(adapter(list[TaskStatus]).validate_python(items), next_cursor, total)


def wait_call(
    task_id: str, run_id: str, poll_interval: float, timeout: float | None
) -> JobCall[TaskStatus]:
    args = {"task_id": task_id, "run_id": run_id, "poll_interval": poll_interval}
    return JobCall("wait_task", args, TaskStatus, status_on_failure=True, timeout=timeout)


def definitions_call() -> JobCall[list[TaskDefinition]]:
    return JobCall("list_installed_task_definitions", {}, list[TaskDefinition])


def definition_call(task: str) -> JobCall[TaskDefinition]:
    return JobCall("get_task_definition", {"task": task}, TaskDefinition)


def submit_call(arguments: dict[str, Any], key: str) -> JobCall[TaskHandle]:
    return JobCall("submit", arguments, TaskHandle, key=key)


def ids_call() -> JobCall[list[str]]:
    return JobCall("list_task_ids", {}, list[str])


def status_call(task_id: str) -> JobCall[TaskStatus]:
    return JobCall("status", {"task_id": task_id}, TaskStatus)


def log_call(
    task_id: str, offset: int, limit: int, run_id: str | None = None
) -> JobCall[TaskLogChunk]:
    args: dict[str, Any] = {"task_id": task_id, "offset": offset, "limit": limit}
    if run_id is not None:
        args["run_id"] = run_id
    return JobCall("read_task_log", args, TaskLogChunk)


def stream_call(task_id: str, poll_interval: float) -> JobCall[TaskStatus]:
    args = {"task_id": task_id, "poll_interval": poll_interval}
    return JobCall("stream_task", args, TaskStatus, status_on_failure=True)


def graph_call(task_id: str) -> JobCall[TaskGraph]:
    return JobCall("get_task_graph", {"task_id": task_id}, TaskGraph)


def context_call(task_id: str) -> JobCall[TaskContext]:
    return JobCall("get_task_context", {"task_id": task_id}, TaskContext)


def cancel_call(task_id: str) -> JobCall[bool]:
    return JobCall("cancel", {"task_id": task_id}, bool)


def delete_call(task_ids: list[str]) -> JobCall[list[str]]:
    return JobCall("delete_tasks", {"task_ids": task_ids}, list[str])


def any_job_call(name: str, arguments: dict[str, Any], answer: Any) -> JobCall[Any]:
    """Any job by name (``GET /jobs`` lists them), its answer validated as ``answer``.
    A name that is not a job's (a ``/``, ``..`` or ``?`` in it) is refused before anything
    is sent: it would make another request out of ``/jobs/{name}``."""
    if not isinstance(name, str) or not JOB_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a job name: letters, digits and '_' only")
    return JobCall(name, arguments, answer)
