"""The store interface of the agent-run backend.

A store keeps sessions (with their history), artifacts, mount grants, runs, run events and
session-state records. Every method is one transaction; the methods that change a run's
state also journal a ``state`` event in that same transaction, so a reader that sees the
new state also sees its event. Implementations: :class:`SQLiteStore` (the server's, WAL)
and :class:`MemoryStore` (in-process, for tests). Both pass ``tests/agents/store_contract``.

Example::

    store = SQLiteStore(Path("ws/agent/state.db"))
    store.create_session(Session(id=new_id("ses"), title="demo", status=SessionStatus.OPEN,
                                 created_at=now, updated_at=now))
    store.add_run(run, exclusive=True)          # RunActive if the session has one
    store.finish_run(run.id, state=TaskState.SUCCEEDED, finished_at=now, exit_code=0,
                     error="", answer=HistoryEntry("assistant", text, run.id, now))

Lists are newest first and paged: ``Page(items, next_cursor)``; pass ``next_cursor`` back
as ``cursor`` for the following page.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from runyard.agents.models import (
    Artifact,
    HistoryEntry,
    MountGrant,
    Page,
    Run,
    RunEvent,
    RunSummary,
    Session,
    SessionRemoval,
    SessionState,
    SessionStatus,
)
from runyard.wire import TaskState


class AgentStore(ABC):
    # a store a full disk kept from opening for writing: why (SQLiteStore), else None
    full_disk: BaseException | None = None

    @property
    def read_only(self) -> bool:
        return self.full_disk is not None

    def reopen(self) -> None:
        """Open a ``read_only`` store for writing again (a space error while it cannot);
        a store that never is read-only has nothing to do."""
        return None

    # sessions
    @abstractmethod
    def create_session(self, session: Session) -> None:
        """Insert, with the turns ``session.history`` already holds (a fork's)."""

    @abstractmethod
    def get_session(self, session_id: str) -> Session | None: ...

    @abstractmethod
    def list_sessions(self, limit: int, cursor: str | None = None) -> Page: ...

    @abstractmethod
    def set_session_status(
        self, session_id: str, status: SessionStatus, now: str
    ) -> Session | None: ...

    @abstractmethod
    def set_session_labels(
        self,
        session_id: str,
        now: str,
        *,
        title: str | None = None,
        tag: str | None = None,
        set_tag: bool = False,
    ) -> Session | None:
        """Set the title (unless None) and, when ``set_tag``, the tag (None clears it);
        None when there is no such session."""  # fmt: skip

    @abstractmethod
    def delete_session(self, session_id: str) -> SessionRemoval | None:
        """Remove the session and every record of it (history, artifacts, grants, runs and
        their events, state record) in one transaction; RunActive (nothing removed) while
        it has a queued or running run; None when there is no such session."""

    @abstractmethod
    def append_history(self, session_id: str, entry: HistoryEntry) -> bool:
        """Add a turn; a second turn with the same ``(run_id, role)`` is ignored (False)."""

    # artifacts
    @abstractmethod
    def add_artifact(self, artifact: Artifact) -> None:
        """Insert; AgentConflict when its relative path overlaps one of the session's."""

    @abstractmethod
    def get_artifact(self, artifact_id: str) -> Artifact | None: ...

    @abstractmethod
    def list_artifacts(self, session_id: str, limit: int, cursor: str | None = None) -> Page: ...

    @abstractmethod
    def stored_names(self) -> set[str]:
        """Every artifact's file name under ``uploads/`` (to sweep what no record names)."""

    # mount grants
    @abstractmethod
    def add_grant(self, grant: MountGrant) -> None:
        """Insert; AgentConflict when the session has an active grant of that name."""

    @abstractmethod
    def get_grant(self, grant_id: str) -> MountGrant | None: ...

    @abstractmethod
    def list_grants(self, session_id: str, limit: int, cursor: str | None = None) -> Page: ...

    @abstractmethod
    def revoke_grant(self, grant_id: str) -> MountGrant | None: ...

    # runs
    @abstractmethod
    def add_run(self, run: Run, *, exclusive: bool) -> None:
        """Insert a queued run; RunActive when ``exclusive`` and the session has an active one."""

    @abstractmethod
    def get_run(self, run_id: str) -> Run | None: ...

    @abstractmethod
    def list_runs(self, session_id: str | None, limit: int, cursor: str | None = None) -> Page: ...

    @abstractmethod
    def run_summaries(self, session_ids: list[str]) -> dict[str, RunSummary]:
        """Each of ``session_ids``: its number of runs and its newest run's state (a session
        without runs, or unknown, gets ``RunSummary()``)."""

    @abstractmethod
    def active_runs(self) -> list[Run]:
        """Queued and running runs, oldest first."""

    @abstractmethod
    def run_by_token_hash(self, token_hash: str) -> Run | None: ...

    @abstractmethod
    def prepare_run(
        self, run_id: str, *, token_hash: str, isolation: str, prompt: HistoryEntry
    ) -> None:
        """Before launch: keep the token hash and isolation, add the user turn to the
        session's history and make the run the session's ``latestRunId``."""

    @abstractmethod
    def mark_running(self, run_id: str, *, started_at: str, handle: dict[str, Any]) -> Run:
        """After launch: a queued run becomes ``running`` with the executor handle (and the
        event is journalled); a run that is no longer queued is returned unchanged."""

    @abstractmethod
    def finish_run(
        self,
        run_id: str,
        *,
        state: TaskState,
        finished_at: str,
        exit_code: int | None,
        error: str,
        answer: HistoryEntry | None,
    ) -> Run | None:
        """Fold ``answer`` into the history and set the terminal state, atomically.

        Returns None (and changes nothing) when the run is already terminal.
        """

    # checkpoints
    @abstractmethod
    def set_checkpoint(self, run_id: str, checkpoint: dict[str, Any]) -> None:
        """Record the run's state snapshot (``state``: present, skipped or pruned)."""

    @abstractmethod
    def list_checkpoints(self, session_id: str, limit: int, cursor: str | None = None) -> Page:
        """The session's runs whose snapshot is present, newest first."""

    # events
    @abstractmethod
    def add_run_event(self, run_id: str, kind: str, data: dict[str, Any], now: str) -> RunEvent: ...

    @abstractmethod
    def run_events(self, run_id: str, after_seq: int = 0, limit: int = 500) -> list[RunEvent]: ...

    # session state
    @abstractmethod
    def ensure_session_state(self, state: SessionState) -> SessionState:
        """Insert the record unless the session has one; return the stored record."""

    @abstractmethod
    def touch_session_state(self, session_id: str, run_id: str, now: str) -> None: ...

    @abstractmethod
    def get_session_state(self, session_id: str) -> SessionState | None: ...

    @abstractmethod
    def close(self) -> None:
        """Release connections and files (a store is unusable afterwards)."""


def state_event(run: Run, at: str) -> dict[str, Any]:
    """The ``state`` event journalled with every change of a run's state."""
    return {
        "state": run.state.value,
        "at": at,
        "exitCode": run.exit_code,
        "error": run.error,
    }
