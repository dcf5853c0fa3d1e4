"""The typed events of ``stream``: progress steps, log windows and the final result.

The server sends them as Server-Sent Events; :class:`SSEParser` turns the lines into
events and remembers the last event id, so a cut stream resumes where it stopped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from runyard.wire import TaskLogChunk, TaskStatus

__all__ = [
    "LogEvent",
    "ProgressEvent",
    "ResultEvent",
    "SSEMessages",
    "SSEParser",
    "StreamEvent",
    "sse_messages",
]


class ProgressEvent(BaseModel):
    """A step of the task started, moved or ended."""

    kind: Literal["progress"] = "progress"
    id: int | None = None
    name: str
    started_at: str | None = None
    finished_at: str | None = None
    percentage: float = 0.0


class LogEvent(BaseModel):
    """New lines of the task's log."""

    kind: Literal["log"] = "log"
    id: int | None = None
    chunk: TaskLogChunk


class ResultEvent(BaseModel):
    """The last event: ``status`` is the final :class:`TaskStatus` when the answer is one."""

    kind: Literal["result"] = "result"
    id: int | None = None
    success: bool
    answer: Any
    status: TaskStatus | None = None


StreamEvent = ProgressEvent | LogEvent | ResultEvent


@dataclass
class SSEMessages:
    """Collects SSE lines into messages: ``feed`` answers the fields of a message at the
    blank line that ends it (comments, i.e. heartbeats, and messages without ``data``
    answer None), and remembers the last event id for resuming."""

    last_id: str | None = None
    _fields: dict[str, str] = field(default_factory=dict)

    def feed(self, line: str) -> dict[str, str] | None:
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
        return fields


@dataclass
class SSEParser:
    """Turns SSE lines into the typed events of a task stream; ``last_id`` for resuming."""

    _messages: SSEMessages = field(default_factory=SSEMessages)

    @property
    def last_id(self) -> str | None:
        return self._messages.last_id

    def feed(self, line: str) -> StreamEvent | None:
        fields = self._messages.feed(line)
        return None if fields is None else typed_event(fields.get("event", "message"), fields)


def sse_messages(lines: Iterable[str]) -> Iterator[tuple[str, Any]]:
    """``(event, data)`` of each message in SSE ``lines``, ``data`` decoded from JSON;
    the kind is ``message`` when the message names none."""
    messages = SSEMessages()
    for line in lines:
        fields = messages.feed(line)
        if fields is not None:
            yield fields.get("event", "message"), json.loads(fields["data"])


def typed_event(kind: str, fields: dict[str, str]) -> StreamEvent | None:
    """The event of one SSE message; ``None`` for a kind this client does not know."""
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
