"""runyard's agent sessions as AxonX 0.2.2 shows them: session UUIDs and answer shapes.

AxonX names a session by a UUID; runyard by its own id (``ses-<ms hex>-<8 hex>``). Each
runyard session has one UUID, derived and never stored: ``uuid5(SESSION_NAMESPACE, id)``
(version 5, so AxonX's UUID pattern accepts it). The session jobs take either form and
answer in the form they were asked with; a list answers UUIDs. Finding a session by its
UUID derives the UUID of each session the caller may see (a run token: its own one; the
admin: every session, newest first, a page at a time), so it costs one hash per session.

A turn of the session history is one AxonX message of one text block; its message UUID is
``uuid5(MESSAGE_NAMESPACE, "<session id>#<turn index>")``, which ``fork_agent_session``'s
``up_to_message_id`` names.

>>> session_uuid("ses-0193f2c4a1b2-9f3e1c7a") == session_uuid("ses-0193f2c4a1b2-9f3e1c7a")
True
>>> is_uuid("ses-0193f2c4a1b2-9f3e1c7a"), is_uuid(session_uuid("ses-1"))
(False, True)
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runyard.agents.errors import AgentNotFound
from runyard.agents.ids import check_agent_id
from runyard.agents.models import HistoryEntry, RunScope, Session
from runyard.agents.store import AgentStore
from runyard.wire import RUN_ID_PATTERN

# uuid5(NAMESPACE_URL, "runyard:agent-session") and (..., "runyard:agent-message"): fixed
SESSION_NAMESPACE = uuid.UUID("c945e94a-0b40-54dd-8bbe-45ebf23da4fd")
MESSAGE_NAMESPACE = uuid.UUID("099f4cba-af77-5e56-8319-92f4cacc8949")
# AxonX 0.2.2's session_id pattern (config/default.yaml)
UUID_PATTERN = (
    "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89aAbB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$"
)
UUID_RE = re.compile(UUID_PATTERN)
# either form: a runyard session id is an agent id (1-64 of [A-Za-z0-9_-]), a UUID is one too
SESSION_REF_PATTERN = RUN_ID_PATTERN
BACKEND = "runyard"
SCAN_PAGE = 500


def is_uuid(value: str) -> bool:
    return UUID_RE.fullmatch(value) is not None


def session_uuid(session_id: str) -> str:
    return str(uuid.uuid5(SESSION_NAMESPACE, session_id))


def message_uuid(session_id: str, index: int) -> str:
    return str(uuid.uuid5(MESSAGE_NAMESPACE, f"{session_id}#{index}"))


@dataclass(frozen=True)
class SessionRef:
    """A session a job named: its runyard id, and whether it was named by UUID."""

    id: str
    by_uuid: bool

    def shown(self, session_id: str | None = None) -> str:
        """``session_id`` (default: this one) in the form this reference was given in."""
        ident = self.id if session_id is None else session_id
        return session_uuid(ident) if self.by_uuid else ident


def resolve(store: AgentStore, ref: str, scope: RunScope | None) -> SessionRef:
    """The session ``ref`` names; AgentNotFound when there is none the caller may see (a
    run token's other sessions look like no session at all)."""
    if not is_uuid(ref):
        check_agent_id(ref, "session")
        return SessionRef(ref, False)
    wanted = ref.lower()
    if scope is not None:
        if session_uuid(scope.session_id) == wanted:
            return SessionRef(scope.session_id, True)
        raise AgentNotFound("agent session", ref)
    cursor: str | None = None
    while True:
        page = store.list_sessions(SCAN_PAGE, cursor)
        for session in page.items:
            if session_uuid(session.id) == wanted:
                return SessionRef(session.id, True)
        cursor = page.next_cursor
        if cursor is None:
            raise AgentNotFound("agent session", ref)


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def first_prompt(history: list[HistoryEntry]) -> str | None:
    return next((turn.content for turn in history if turn.role == "user"), None)


def session_info(session: Session, shown_id: str) -> dict[str, Any]:
    """AxonX's ``AgentSessionInfo``: ``summary`` is the title, else the first prompt."""
    prompt = first_prompt(session.history)
    return {
        "session_id": shown_id,
        "summary": session.title or (prompt or "")[:200],
        "last_modified": _epoch(session.updated_at),
        "file_size": None,
        "custom_title": session.title or None,
        "first_prompt": prompt,
        "git_branch": None,
        "cwd": None,
        "tag": session.tag,
        "created_at": _epoch(session.created_at),
        "backend": BACKEND,
    }


def history_blocks(session: Session, offset: int, limit: int | None) -> list[dict[str, Any]]:
    """AxonX's ``AgentHistoryBlock`` list: one text block per turn, ``offset``/``limit``
    counted in turns (AxonX counts messages)."""
    end = None if limit is None else offset + limit
    blocks = []
    for index, turn in enumerate(session.history[offset:end], start=offset):
        message = message_uuid(session.id, index)
        blocks.append(
            {
                "block_id": f"{message}:0",
                "block_type": "system" if turn.role == "system" else "text",
                "message_uuid": message,
                "role": turn.role,
                "status": "completed",
                "text": turn.content,
                "payload": {"run_id": turn.run_id, "created_at": turn.created_at},
            }
        )
    return blocks


def run_of_message(session: Session, wanted: str) -> str:
    """The run whose turn the message ``wanted`` is (a fork point)."""
    for index, turn in enumerate(session.history):
        if message_uuid(session.id, index) == wanted.lower():
            if turn.run_id is None:
                raise AgentNotFound("run turn (a note, not a run's turn) at message", wanted)
            return turn.run_id
    raise AgentNotFound("message", wanted)
