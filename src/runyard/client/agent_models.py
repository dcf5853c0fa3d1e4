"""The records of the agent-run API (``/api/v1``) as the client reads them.

The API speaks camelCase (``sessionId``); these models expose snake_case attributes
(``session_id``) and keep any field they do not name, so a newer server's additions are
not lost (``model_extra``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "AgentPackage",
    "Artifact",
    "Checkpoint",
    "HistoryEntry",
    "MountGrant",
    "OutputFile",
    "Run",
    "Session",
]

TERMINAL_RUN_STATES = frozenset({"succeeded", "failed", "cancelled"})


class _Wire(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, validate_by_alias=True, extra="allow"
    )


class HistoryEntry(_Wire):
    """One turn of a session: the user's prompt or a run's answer."""

    role: str
    content: str
    run_id: str | None = None
    created_at: str


class Session(_Wire):
    """A conversation: its runs share its uploads and its history."""

    id: str
    title: str
    status: Literal["OPEN", "CLOSED"] | str
    created_at: str
    updated_at: str
    latest_run_id: str | None = None
    history: list[HistoryEntry] = Field(default_factory=list)
    forked_from: dict[str, str] | None = None
    # in the sessions list only: how many runs it has, and its newest run's state
    run_count: int | None = None
    latest_run_state: str | None = None


class Artifact(_Wire):
    """An uploaded file, readable by the session's runs under ``in/<relative_path>``."""

    id: str
    session_id: str
    file_name: str
    relative_path: str
    size: int
    media_type: str
    created_at: str


class Run(_Wire):
    """One agent run of a session; ``state`` is queued, running, succeeded, failed or
    cancelled."""

    id: str
    session_id: str
    state: str
    user_prompt: str
    created_at: str
    system_prompt: str = ""
    package: str = ""
    artifact_ids: list[str] = Field(default_factory=list)
    mount_grant_ids: list[str] = Field(default_factory=list)
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    error: str = ""
    isolation: str = ""
    checkpoint: dict[str, Any] | None = None

    @property
    def terminal(self) -> bool:
        """True once the run has ended (succeeded, failed or cancelled)."""
        return self.state in TERMINAL_RUN_STATES


class OutputFile(_Wire):
    """A file a run wrote under its ``out/`` folder."""

    path: str
    size: int
    media_type: str
    modified_at: str


class MountGrant(_Wire):
    """A host folder a session's runs may mount (read-only ``ro`` or ``rw``); a run's
    token reads ``host_path`` as where it is mounted in its sandbox."""

    id: str
    session_id: str
    name: str
    host_path: str
    access: str
    created_at: str
    revoked: bool = False


class Checkpoint(_Wire):
    """A run's checkpoint of its session's state folder: what ``fork_session`` and
    ``restore_session`` start from (``skipped`` says why none was kept)."""

    run_id: str
    created_at: str | None = None
    files: int = 0
    bytes: int = 0
    skipped: str | None = None


class AgentPackage(_Wire):
    """An agent package a run may name (``default``: used when a run names none)."""

    name: str
    version: str = ""
    description: str = ""
    path: str = ""
    default: bool = False
