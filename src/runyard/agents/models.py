"""The records of the agent-run backend and their camelCase wire form.

Records are plain dataclasses; :func:`to_wire` is the one place that turns them into the
JSON of DESIGN section 6. Fields a record lists in ``_private`` stay off the wire (storage
names, token hashes, process handles).

Run tokens: a run's bearer secret (``ryr_...``), scoped to one run and so to one session
(:class:`RunScope`). Only the SHA-256 of a token is stored. A token opens ``/jobs`` and
``/api/v1`` while its run is queued or running; the agent routes then narrow it to the run's
own session.

Names a client chooses (upload file names, relative paths, grant names, titles) are checked
here: a bad name is refused with a message that says the rule, never silently rewritten. The
one derived name, the placement name ``<artifact-id>-<sanitized-name>`` of an artifact
without a relative path, keeps only a safe character set.
"""

from __future__ import annotations

import hashlib
import mimetypes
import re
import secrets
import time
import unicodedata
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any

from runyard.agents.errors import AgentInvalid
from runyard.wire import TaskState


class SessionStatus(StrEnum):
    OPEN = "OPEN"
    CLOSED = "CLOSED"


# a run's state is a task's (TaskState, runyard.wire): one enum, the same strings on the wire
ACTIVE_STATES = (TaskState.QUEUED, TaskState.RUNNING)


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
    tag: str | None = None  # one free label (AxonX's tag_agent_session); None: untagged

    @property
    def writable(self) -> bool:
        return self.status == SessionStatus.OPEN


@dataclass(frozen=True)
class SessionRemoval:
    """What deleting a session took from the store: its runs' ids and its uploads' stored
    file names, whose folders, logs and files go next."""

    run_ids: list[str]
    stored_names: list[str]


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
    state: TaskState
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
class RunSummary:
    """How many runs a session has and the state of its newest (None: it has none); the
    sessions list shows them beside each session."""

    run_count: int = 0
    latest_run_state: TaskState | None = None


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


TOKEN_PREFIX = "ryr_"


@dataclass(frozen=True)
class RunScope:
    """What a request authenticated by a run token may touch."""

    run_id: str
    session_id: str

    def allows_session(self, session_id: str) -> bool:
        return session_id == self.session_id


def new_run_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def looks_like_run_token(token: str) -> bool:
    return token.startswith(TOKEN_PREFIX) and 20 < len(token) < 200


MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 1024
MAX_DEPTH = 32
MAX_TITLE_CHARS = 200
RESERVED_INPUTS = frozenset({"run-context.json"})
GRANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
MEDIA_TYPE = re.compile(r"^[A-Za-z0-9!#$&^_.+-]{1,64}/[A-Za-z0-9!#$&^_.+-]{1,64}$")
FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def _check_characters(value: str, what: str) -> None:
    for char in value:
        if unicodedata.category(char) in FORBIDDEN_CATEGORIES:
            raise AgentInvalid(
                f"{what} {value!r} contains the control or format character "
                f"U+{ord(char):04X}; only printable characters are allowed"
            )


def check_segment(segment: str, what: str) -> str:
    """One path segment: non-empty, not ``.``/``..``, no slash, printable, <= 255 bytes."""
    if segment in ("", ".", ".."):
        raise AgentInvalid(f"{what} may not contain an empty, '.' or '..' segment")
    if "/" in segment or "\\" in segment:
        raise AgentInvalid(f"{what} {segment!r} may not contain '/' or '\\'")
    _check_characters(segment, what)
    if len(segment.encode("utf-8")) > MAX_NAME_BYTES:
        raise AgentInvalid(f"{what} segment is longer than {MAX_NAME_BYTES} bytes")
    return segment


def check_file_name(name: str | None) -> str:
    """An upload's file name: a single printable segment of at most 255 bytes."""
    if not name:
        raise AgentInvalid("The upload has no file name; send the file part with a filename")
    return check_segment(name, "File name")


def check_relative_path(value: str | None) -> str:
    """A relative POSIX path under ``in/``: no ``..``, not absolute, printable, bounded."""
    if value is None or value == "":
        return ""
    what = "relativePath"
    if value.startswith("/") or re.match(r"^[A-Za-z]:", value):
        raise AgentInvalid(f"{what} {value!r} must be relative (it is placed under in/)")
    if "\\" in value:
        raise AgentInvalid(f"{what} {value!r} may not contain '\\'; separate folders with '/'")
    if len(value.encode("utf-8")) > MAX_PATH_BYTES:
        raise AgentInvalid(f"{what} is longer than {MAX_PATH_BYTES} bytes")
    segments = value.split("/")
    if len(segments) > MAX_DEPTH:
        raise AgentInvalid(f"{what} is deeper than {MAX_DEPTH} folders")
    for segment in segments:
        check_segment(segment, what)
    if value in RESERVED_INPUTS:
        raise AgentInvalid(f"{what} {value!r} is reserved for the file runyard writes")
    return str(PurePosixPath(value))


def placement_name(artifact_id: str, file_name: str) -> str:
    """``<artifact-id>-<sanitized-name>``: only ``[A-Za-z0-9._-]`` and never hidden."""
    safe = UNSAFE_CHARS.sub("_", unicodedata.normalize("NFKD", file_name)).strip("._")
    return f"{artifact_id}-{safe[:100] or 'file'}"


def media_type_for(file_name: str, declared: str | None) -> str:
    declared = (declared or "").split(";")[0].strip().lower()
    if declared and declared != "application/octet-stream" and MEDIA_TYPE.match(declared):
        return declared
    guessed, _ = mimetypes.guess_type(file_name, strict=False)
    return guessed or "application/octet-stream"


def check_grant_name(name: str) -> str:
    if not isinstance(name, str) or not GRANT_NAME.match(name):
        raise AgentInvalid(
            f"Mount grant name {name!r} must match {GRANT_NAME.pattern} "
            "(it becomes /workspace/mounts/<name>)"
        )
    return name


def check_title(title: str | None, what: str = "title") -> str:
    """A session's title (or tag, ``what``): printable, at most 200 characters."""
    title = title or ""
    if len(title) > MAX_TITLE_CHARS:
        raise AgentInvalid(f"{what} is longer than {MAX_TITLE_CHARS} characters")
    _check_characters(title, what)
    return title


def paths_overlap(first: str, second: str) -> bool:
    """True when one relative path is the other or a folder of it (they cannot coexist)."""
    return first == second or first.startswith(second + "/") or second.startswith(first + "/")
