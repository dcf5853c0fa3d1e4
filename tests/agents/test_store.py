"""The store contract, run against every implementation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runyard.agents.errors import AgentConflict, BadRequest, RunActive
from runyard.agents.models import (
    Access,
    Artifact,
    HistoryEntry,
    MountGrant,
    Run,
    RunSummary,
    Session,
    SessionState,
    SessionStatus,
    new_id,
)
from runyard.agents.store import AgentStore, MemoryStore, SQLiteStore
from runyard.agents.store.schema import MIGRATIONS, schema_version
from runyard.wire import TaskState

NOW = "2026-01-01T00:00:00.000000Z"


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AgentStore]:
    made: AgentStore = (
        SQLiteStore(tmp_path / "state.db") if request.param == "sqlite" else MemoryStore()
    )
    yield made
    made.close()


def session(store: AgentStore, title: str = "t") -> Session:
    record = Session(new_id("ses"), title, SessionStatus.OPEN, NOW, NOW)
    store.create_session(record)
    return record


def artifact(session_id: str, relative_path: str = "") -> Artifact:
    ident = new_id("art")
    return Artifact(ident, session_id, "a.csv", relative_path, 3, "ab" * 32, "text/csv", NOW, ident)


def run(session_id: str) -> Run:
    return Run(new_id("run"), session_id, TaskState.QUEUED, "hello", NOW, package="reference")


def test_sessions_round_trip_and_page_newest_first(store: AgentStore) -> None:
    made = [session(store, f"s{i}") for i in range(5)]
    first = store.list_sessions(2)
    assert [s.title for s in first.items] == ["s4", "s3"]
    second = store.list_sessions(2, first.next_cursor)
    third = store.list_sessions(2, second.next_cursor)
    assert [s.title for s in second.items + third.items] == ["s2", "s1", "s0"]
    assert third.next_cursor is None
    assert store.get_session(made[0].id) == made[0]
    assert store.get_session("ses-missing") is None


def test_bad_cursor_is_refused(store: AgentStore) -> None:
    with pytest.raises(BadRequest):
        store.list_sessions(2, "not-a-cursor")


def test_status_change(store: AgentStore) -> None:
    record = session(store)
    closed = store.set_session_status(record.id, SessionStatus.CLOSED, "2026-01-02T00:00:00Z")
    assert closed is not None and closed.status == SessionStatus.CLOSED
    assert closed.updated_at == "2026-01-02T00:00:00Z"


def test_history_turn_is_kept_once_per_run_and_role(store: AgentStore) -> None:
    record = session(store)
    answer = HistoryEntry("assistant", "hi", "run-1", NOW)
    assert store.append_history(record.id, HistoryEntry("user", "q", "run-1", NOW))
    assert store.append_history(record.id, answer)
    assert not store.append_history(record.id, answer)
    loaded = store.get_session(record.id)
    assert loaded is not None
    assert [(t.role, t.content) for t in loaded.history] == [("user", "q"), ("assistant", "hi")]


def test_artifact_paths_may_not_overlap_within_a_session(store: AgentStore) -> None:
    first, other = session(store), session(store)
    store.add_artifact(artifact(first.id, "data/prices.csv"))
    for clash in ("data/prices.csv", "data", "data/prices.csv/x"):
        with pytest.raises(AgentConflict):
            store.add_artifact(artifact(first.id, clash))
    store.add_artifact(artifact(other.id, "data/prices.csv"))
    store.add_artifact(artifact(first.id, ""))
    store.add_artifact(artifact(first.id, ""))
    assert len(store.list_artifacts(first.id, 10).items) == 3
    assert len(store.stored_names()) == 4


def test_grant_names_are_unique_among_active_grants(store: AgentStore) -> None:
    record = session(store)
    grant = MountGrant(new_id("mnt"), record.id, "data", "/srv/data", Access.RO, NOW)
    store.add_grant(grant)
    with pytest.raises(AgentConflict):
        store.add_grant(MountGrant(new_id("mnt"), record.id, "data", "/srv", Access.RW, NOW))
    revoked = store.revoke_grant(grant.id)
    assert revoked is not None and revoked.revoked
    store.add_grant(MountGrant(new_id("mnt"), record.id, "data", "/srv", Access.RW, NOW))
    assert len(store.list_grants(record.id, 10).items) == 2


def test_one_active_run_per_session_unless_queued(store: AgentStore) -> None:
    record = session(store)
    first = run(record.id)
    store.add_run(first, exclusive=True)
    with pytest.raises(RunActive):
        store.add_run(run(record.id), exclusive=True)
    queued = run(record.id)
    store.add_run(queued, exclusive=False)
    assert [r.id for r in store.active_runs()] == [first.id, queued.id]


def test_run_lifecycle_journals_states_and_folds_answer_once(store: AgentStore) -> None:
    record = session(store)
    first = run(record.id)
    store.add_run(first, exclusive=True)
    prompt = HistoryEntry("user", "hello", first.id, NOW)
    store.prepare_run(first.id, token_hash="h" * 64, isolation="bwrap", prompt=prompt)
    assert store.run_by_token_hash("h" * 64).id == first.id  # type: ignore[union-attr]
    running = store.mark_running(first.id, started_at=NOW, handle={"pid": 1})
    assert running.state == TaskState.RUNNING and running.handle == {"pid": 1}
    answer = HistoryEntry("assistant", "done", first.id, NOW)
    finished = store.finish_run(
        first.id, state=TaskState.SUCCEEDED, finished_at=NOW, exit_code=0, error="", answer=answer
    )
    assert finished is not None and finished.state == TaskState.SUCCEEDED
    again = store.finish_run(
        first.id, state=TaskState.FAILED, finished_at=NOW, exit_code=1, error="x", answer=answer
    )
    assert again is None
    loaded = store.get_session(record.id)
    assert loaded is not None and loaded.latest_run_id == first.id
    assert [t.role for t in loaded.history] == ["user", "assistant"]
    assert [e.data["state"] for e in store.run_events(first.id)] == [
        "queued", "running", "succeeded",
    ]  # fmt: skip
    assert [e.seq for e in store.run_events(first.id, after_seq=1)] == [2, 3]
    assert store.active_runs() == []


def test_a_finished_run_is_not_revived_by_a_late_launch(store: AgentStore) -> None:
    record = session(store)
    late = run(record.id)
    store.add_run(late, exclusive=True)
    store.finish_run(
        late.id, state=TaskState.CANCELLED, finished_at=NOW, exit_code=130, error="", answer=None
    )
    assert store.mark_running(late.id, started_at=NOW, handle={}).state == TaskState.CANCELLED


def test_run_summaries_count_runs_and_give_the_newest_state(store: AgentStore) -> None:
    busy, idle, other = session(store, "busy"), session(store, "idle"), session(store, "other")
    first, second = run(busy.id), run(busy.id)
    store.add_run(first, exclusive=True)
    store.finish_run(
        first.id, state=TaskState.FAILED, finished_at=NOW, exit_code=1, error="x", answer=None
    )
    store.add_run(run(other.id), exclusive=True)  # another session's run counts there only
    store.add_run(second, exclusive=True)
    store.mark_running(second.id, started_at=NOW, handle={})
    summaries = store.run_summaries([busy.id, idle.id, "ses-unknown"])
    assert summaries == {
        busy.id: RunSummary(2, TaskState.RUNNING),
        idle.id: RunSummary(0, None),
        "ses-unknown": RunSummary(0, None),
    }
    store.finish_run(
        second.id, state=TaskState.SUCCEEDED, finished_at=NOW, exit_code=0, error="", answer=None
    )
    assert store.run_summaries([busy.id])[busy.id] == RunSummary(2, TaskState.SUCCEEDED)
    assert store.run_summaries([]) == {}


def test_session_state_record(store: AgentStore) -> None:
    record = session(store)
    state = SessionState(record.id, "/ws/agent/session-state/x", NOW, NOW)
    assert store.ensure_session_state(state) == state
    store.touch_session_state(record.id, "run-1", "2026-01-03T00:00:00Z")
    store.touch_session_state(record.id, "run-2", "2026-01-04T00:00:00Z")
    again = store.ensure_session_state(SessionState(record.id, "/elsewhere", NOW, NOW))
    assert again.path == state.path and again.run_count == 2 and again.last_run_id == "run-2"


def test_sqlite_schema_is_migrated_once_and_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    first = SQLiteStore(path)
    record = session(first)
    first.close()
    second = SQLiteStore(path)
    assert second.get_session(record.id) == record
    assert schema_version(second._conn) == len(MIGRATIONS)
    journal = second._conn.execute("PRAGMA journal_mode").fetchone()["journal_mode"]
    assert journal == "wal"
    second.close()
