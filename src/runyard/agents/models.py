"""The records of the agent-run backend and their camelCase wire form.

Records are plain dataclasses; :func:`to_wire` is the one place that turns them into the
JSON of DESIGN section 6. Fields a record lists in ``_private`` stay off the wire (storage
names, token hashes, process handles).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any


class SessionStatus(StrEnum):
    OPEN = "OPEN"
    CLOSED = "CLOSED"


class RunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)


ACTIVE_STATES = (RunState.QUEUED, RunState.RUNNING)


class Access(StrEnum):
    RO = "ro"
    RW = "rw"


def new_id(prefix: str) -> str:
    """A short, path-safe, roughly time-ordered id such as ``run-0193f2c4a1b2-9f3e1c7a``."""
    return f"{prefix}-{int(time.time() * 1000):012x}-{secrets.token_hex(4)}"


HISTORY_ROLES = ("user", "assistant", "system")  # system: notes such as a state restore


@dataclass(frozen=True)
class HistoryEntry:
    role: str
    content: str
    run_id: str | None
    created_at: str


@dataclass
class Session:
    id: str
    title: str
    status: SessionStatus
    created_at: str
    updated_at: str
    latest_run_id: str | None = None
    history: list[HistoryEntry] = field(default_factory=list)
    # {"sessionId", "runId"} of the checkpoint this session was forked from
    forked_from: dict[str, str] | None = None

    @property
    def writable(self) -> bool:
        return self.status == SessionStatus.OPEN


@dataclass
class Artifact:
    id: str
    session_id: str
    file_name: str
    relative_path: str
    size: int
    sha256: str
    media_type: str
    created_at: str
    stored_name: str = ""

    _private = ("stored_name",)


@dataclass
class MountGrant:
    id: str
    session_id: str
    name: str
    host_path: str
    access: Access
    created_at: str
    revoked: bool = False


@dataclass
class Run:
    id: str
    session_id: str
    state: RunState
    user_prompt: str
    created_at: str
    system_prompt: str = ""
    package: str = ""
    artifact_ids: list[str] = field(default_factory=list)
    mount_grant_ids: list[str] = field(default_factory=list)
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    error: str = ""
    isolation: str = ""
    token_hash: str = ""
    handle: dict[str, Any] = field(default_factory=dict)
    # the state snapshot taken when the run ended (see agents/snapshots.py); None before
    checkpoint: dict[str, Any] | None = None

    _private = ("token_hash", "handle")


@dataclass
class SessionState:
    """Where a session's state folder lives and which run used it last."""

    session_id: str
    path: str
    created_at: str
    updated_at: str
    last_run_id: str | None = None
    run_count: int = 0


@dataclass(frozen=True)
class RunEvent:
    run_id: str
    seq: int
    kind: str
    data: dict[str, Any]
    created_at: str


@dataclass(frozen=True)
class Page:
    items: list[Any]
    next_cursor: str | None = None


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def to_wire(record: Any) -> Any:
    """A record (or list/page of records) as camelCase JSON-ready data."""
    if isinstance(record, Page):
        return {"items": [to_wire(item) for item in record.items], "nextCursor": record.next_cursor}
    if isinstance(record, list):
        return [to_wire(item) for item in record]
    if isinstance(record, StrEnum):
        return record.value
    if not hasattr(record, "__dataclass_fields__"):
        return record
    private = getattr(type(record), "_private", ())
    return {
        camel(f.name): to_wire(getattr(record, f.name))
        for f in fields(record)
        if f.name not in private
    }
