"""An in-process store with the same contract as the SQLite one (for tests and embedding).

Its records come only through its own methods, so checking what is added is enough: a
record whose ids are not one path component is refused (``require_valid``) and logged.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from runyard.agents.errors import AgentConflict, AgentNotFound, RunActive
from runyard.agents.models import (
    ACTIVE_STATES,
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
    paths_overlap,
)
from runyard.agents.store.base import AgentStore, state_event
from runyard.agents.store.sqlite import parse_cursor
from runyard.agents.store.validity import require_valid
from runyard.wire import TaskState


class MemoryStore(AgentStore):
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._sessions: dict[str, Session] = {}
        self._artifacts: dict[str, Artifact] = {}
        self._grants: dict[str, MountGrant] = {}
        self._runs: dict[str, Run] = {}
        self._events: dict[str, list[RunEvent]] = {}
        self._states: dict[str, SessionState] = {}
        self._order: dict[str, int] = {}

    def close(self) -> None:
        with self._lock:
            self._sessions.clear()

    def _remember(self, ident: str) -> None:
        self._order[ident] = len(self._order) + 1

    def _page(
        self, records: list[Any], limit: int, cursor: str | None, keep: Callable[[Any], bool]
    ) -> Page:
        after = parse_cursor(cursor)
        chosen = sorted(
            (r for r in records if keep(r) and (after is None or self._order[r.id] < after)),
            key=lambda r: -self._order[r.id],
        )
        more = len(chosen) > limit
        chosen = chosen[:limit]
        next_cursor = str(self._order[chosen[-1].id]) if more else None
        return Page([copy.deepcopy(r) for r in chosen], next_cursor)

    # sessions
    def create_session(self, session: Session) -> None:
        require_valid(session)
        with self._lock:
            self._sessions[session.id] = copy.deepcopy(session)
            self._remember(session.id)

    def get_session(self, session_id: str) -> Session | None:
        with self._lock:
            return copy.deepcopy(self._sessions.get(session_id))

    def list_sessions(self, limit: int, cursor: str | None = None) -> Page:
        with self._lock:
            return self._page(list(self._sessions.values()), limit, cursor, lambda _: True)

    def set_session_status(
        self, session_id: str, status: SessionStatus, now: str
    ) -> Session | None:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None:
                session.status, session.updated_at = status, now
            return copy.deepcopy(session)

    def set_session_labels(
        self, session_id: str, now: str, *, title: str | None = None, tag: str | None = None,
        set_tag: bool = False,
    ) -> Session | None:  # fmt: skip
        with self._lock:
            session = self._sessions.get(session_id)
            if session is not None:
                session.title = session.title if title is None else title
                session.tag = tag if set_tag else session.tag
                session.updated_at = now
            return copy.deepcopy(session)

    def delete_session(self, session_id: str) -> SessionRemoval | None:
        with self._lock:
            if session_id not in self._sessions:
                return None
            runs = [r for r in self._runs.values() if r.session_id == session_id]
            for run in runs:
                if run.state in ACTIVE_STATES:
                    raise RunActive(session_id, run.id)
            names = [a.stored_name for a in self._artifacts.values() if a.session_id == session_id]
            for run in runs:
                del self._runs[run.id]
                self._events.pop(run.id, None)
            for records in (self._artifacts, self._grants):
                for ident in [i for i, r in records.items() if r.session_id == session_id]:
                    del records[ident]
            self._states.pop(session_id, None)
            del self._sessions[session_id]
            return SessionRemoval([run.id for run in runs], names)

    def append_history(self, session_id: str, entry: HistoryEntry) -> bool:
        require_valid(entry)
        with self._lock:
            session = self._sessions[session_id]
            if entry.run_id is not None and any(
                (turn.run_id, turn.role) == (entry.run_id, entry.role) for turn in session.history
            ):
                return False
            session.history.append(entry)
            session.updated_at = entry.created_at
            return True

    # artifacts
    def add_artifact(self, artifact: Artifact) -> None:
        require_valid(artifact)
        with self._lock:
            mine = artifact.relative_path
            for other in self._artifacts.values():
                same_session = other.session_id == artifact.session_id
                if (
                    same_session
                    and mine
                    and other.relative_path
                    and paths_overlap(other.relative_path, mine)
                ):
                    raise AgentConflict(
                        f"relativePath {artifact.relative_path!r} collides with "
                        f"{other.relative_path!r} of artifact {other.id} in this session"
                    )
            self._artifacts[artifact.id] = copy.deepcopy(artifact)
            self._remember(artifact.id)

    def get_artifact(self, artifact_id: str) -> Artifact | None:
        with self._lock:
            return copy.deepcopy(self._artifacts.get(artifact_id))

    def list_artifacts(self, session_id: str, limit: int, cursor: str | None = None) -> Page:
        with self._lock:
            records = list(self._artifacts.values())
            return self._page(records, limit, cursor, lambda a: a.session_id == session_id)

    def stored_names(self) -> set[str]:
        with self._lock:
            return {a.stored_name for a in self._artifacts.values()}

    # mount grants
    def add_grant(self, grant: MountGrant) -> None:
        require_valid(grant)
        with self._lock:
            for other in self._grants.values():
                if (other.session_id, other.name, other.revoked) == (
                    grant.session_id, grant.name, False,
                ):  # fmt: skip
                    raise AgentConflict(
                        f"Session {grant.session_id} already has an active mount grant named "
                        f"{grant.name!r}; revoke it first or choose another name"
                    )
            self._grants[grant.id] = copy.deepcopy(grant)
            self._remember(grant.id)

    def get_grant(self, grant_id: str) -> MountGrant | None:
        with self._lock:
            return copy.deepcopy(self._grants.get(grant_id))

    def list_grants(self, session_id: str, limit: int, cursor: str | None = None) -> Page:
        with self._lock:
            records = list(self._grants.values())
            return self._page(records, limit, cursor, lambda g: g.session_id == session_id)

    def revoke_grant(self, grant_id: str) -> MountGrant | None:
        with self._lock:
            grant = self._grants.get(grant_id)
            if grant is not None:
                grant.revoked = True
            return copy.deepcopy(grant)

    # runs
    def add_run(self, run: Run, *, exclusive: bool) -> None:
        require_valid(run)
        with self._lock:
            if exclusive:
                for other in self._runs.values():
                    if other.session_id == run.session_id and other.state in ACTIVE_STATES:
                        raise RunActive(run.session_id, other.id)
            self._runs[run.id] = copy.deepcopy(run)
            self._remember(run.id)
            self._event(run.id, "state", state_event(run, run.created_at), run.created_at)

    def _run(self, run_id: str) -> Run:
        run = self._runs.get(run_id)
        if run is None:
            raise AgentNotFound("run", run_id)
        return run

    def get_run(self, run_id: str) -> Run | None:
        with self._lock:
            return copy.deepcopy(self._runs.get(run_id))

    def list_runs(self, session_id: str | None, limit: int, cursor: str | None = None) -> Page:
        with self._lock:
            records = list(self._runs.values())
            return self._page(
                records, limit, cursor, lambda r: session_id is None or r.session_id == session_id
            )

    def run_summaries(self, session_ids: list[str]) -> dict[str, RunSummary]:
        with self._lock:
            wanted = set(session_ids)
            runs = sorted(
                (r for r in self._runs.values() if r.session_id in wanted),
                key=lambda r: self._order[r.id],
            )
            found: dict[str, RunSummary] = {}
            for run in runs:  # oldest first: the newest one's state is the one kept
                count = found.get(run.session_id, RunSummary()).run_count
                found[run.session_id] = RunSummary(count + 1, run.state)
            return {ident: found.get(ident, RunSummary()) for ident in session_ids}

    def active_runs(self) -> list[Run]:
        with self._lock:
            active = [r for r in self._runs.values() if r.state in ACTIVE_STATES]
            return [copy.deepcopy(r) for r in sorted(active, key=lambda r: self._order[r.id])]

    def run_by_token_hash(self, token_hash: str) -> Run | None:
        with self._lock:
            for run in self._runs.values():
                if token_hash and run.token_hash == token_hash:
                    return copy.deepcopy(run)
            return None

    def prepare_run(
        self, run_id: str, *, token_hash: str, isolation: str, prompt: HistoryEntry
    ) -> None:
        with self._lock:
            run = self._run(run_id)
            run.token_hash, run.isolation = token_hash, isolation
            self.append_history(run.session_id, prompt)
            session = self._sessions[run.session_id]
            session.latest_run_id, session.updated_at = run_id, prompt.created_at

    def mark_running(self, run_id: str, *, started_at: str, handle: dict[str, Any]) -> Run:
        with self._lock:
            run = self._run(run_id)
            if run.state == TaskState.QUEUED:
                run.state, run.started_at, run.handle = TaskState.RUNNING, started_at, dict(handle)
                self._event(run_id, "state", state_event(run, started_at), started_at)
            return copy.deepcopy(run)

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
        with self._lock:
            run = self._run(run_id)
            if run.state.terminal:
                return None
            if answer is not None:
                self.append_history(run.session_id, answer)
            run.state, run.finished_at = state, finished_at
            run.exit_code, run.error = exit_code, error
            self._event(run_id, "state", state_event(run, finished_at), finished_at)
            return copy.deepcopy(run)

    # checkpoints
    def set_checkpoint(self, run_id: str, checkpoint: dict[str, Any]) -> None:
        with self._lock:
            self._run(run_id).checkpoint = copy.deepcopy(checkpoint)

    def list_checkpoints(self, session_id: str, limit: int, cursor: str | None = None) -> Page:
        def keep(run: Run) -> bool:
            present = run.checkpoint is not None and run.checkpoint.get("state") == "present"
            return run.session_id == session_id and present

        with self._lock:
            return self._page(list(self._runs.values()), limit, cursor, keep)

    # events
    def _event(self, run_id: str, kind: str, data: dict[str, Any], now: str) -> RunEvent:
        events = self._events.setdefault(run_id, [])
        event = RunEvent(run_id, len(events) + 1, kind, copy.deepcopy(data), now)
        events.append(event)
        return event

    def add_run_event(self, run_id: str, kind: str, data: dict[str, Any], now: str) -> RunEvent:
        with self._lock:
            self._run(run_id)
            return self._event(run_id, kind, data, now)

    def run_events(self, run_id: str, after_seq: int = 0, limit: int = 500) -> list[RunEvent]:
        with self._lock:
            events = self._events.get(run_id, [])
            return [copy.deepcopy(e) for e in events if e.seq > after_seq][:limit]

    # session state
    def ensure_session_state(self, state: SessionState) -> SessionState:
        require_valid(state)
        with self._lock:
            stored = self._states.setdefault(state.session_id, replace(state))
            return replace(stored)

    def touch_session_state(self, session_id: str, run_id: str, now: str) -> None:
        with self._lock:
            state = self._states.get(session_id)
            if state is not None:
                state.last_run_id, state.updated_at = run_id, now
                state.run_count += 1

    def get_session_state(self, session_id: str) -> SessionState | None:
        with self._lock:
            state = self._states.get(session_id)
            return None if state is None else replace(state)
