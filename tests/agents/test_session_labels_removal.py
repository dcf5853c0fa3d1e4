"""A session's tag and title, and its deletion, in both stores: the deletion takes every
record of the session and nothing of another, and is refused (nothing taken) while a run
of it is queued or running. A database of schema 2 gains the tag column."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_store import NOW, artifact, run, session

from runyard.agents.errors import RunActive
from runyard.agents.models import (
    Access,
    HistoryEntry,
    MountGrant,
    Session,
    SessionState,
    SessionStatus,
)
from runyard.agents.store import AgentStore, MemoryStore, SQLiteStore
from runyard.agents.store.schema import MIGRATIONS
from runyard.wire import TaskState


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AgentStore]:
    made: AgentStore = (
        SQLiteStore(tmp_path / "state.db") if request.param == "sqlite" else MemoryStore()
    )
    yield made
    made.close()


def test_title_and_tag_are_set_and_cleared(store: AgentStore) -> None:
    made = session(store, "old")
    store.set_session_labels(made.id, "later", title="new")
    updated = store.set_session_labels(made.id, "later2", tag="finance", set_tag=True)
    assert updated is not None
    assert (updated.title, updated.tag, updated.updated_at) == ("new", "finance", "later2")
    kept = store.set_session_labels(made.id, "later3", title="newer")  # tag not touched
    assert kept is not None and kept.tag == "finance"
    cleared = store.set_session_labels(made.id, "later4", tag=None, set_tag=True)
    assert cleared is not None and (cleared.title, cleared.tag) == ("newer", None)
    assert store.set_session_labels("ses-none", "x", title="t") is None


def _fill(store: AgentStore, session_id: str) -> tuple[str, str]:
    art = artifact(session_id)
    store.add_artifact(art)
    store.add_grant(MountGrant(f"mnt-{session_id}", session_id, "data", "/srv", Access.RO, NOW))
    first = run(session_id)
    store.add_run(first, exclusive=True)
    store.add_run_event(first.id, "note", {"n": 1}, NOW)
    store.append_history(session_id, HistoryEntry("user", "hi", first.id, NOW))
    store.ensure_session_state(SessionState(session_id, "/x", NOW, NOW))
    return first.id, art.stored_name


def test_delete_takes_every_record_of_the_session_only(store: AgentStore) -> None:
    doomed, kept = session(store, "doomed"), session(store, "kept")
    run_id, stored = _fill(store, doomed.id)
    other_run, _ = _fill(store, kept.id)

    with pytest.raises(RunActive):  # its run is queued: nothing is taken
        store.delete_session(doomed.id)
    assert store.get_session(doomed.id) is not None and store.get_run(run_id) is not None

    store.finish_run(run_id, state=TaskState.CANCELLED, finished_at=NOW, exit_code=None,
                     error="", answer=None)  # fmt: skip
    removed = store.delete_session(doomed.id)
    assert removed is not None
    assert (removed.run_ids, removed.stored_names) == ([run_id], [stored])
    assert store.get_session(doomed.id) is None and store.get_run(run_id) is None
    assert store.run_events(run_id) == []
    assert store.get_session_state(doomed.id) is None
    assert store.list_artifacts(doomed.id, 10).items == []
    assert store.list_grants(doomed.id, 10).items == []
    assert store.delete_session(doomed.id) is None
    # the other session is whole
    survivor = store.get_session(kept.id)
    assert survivor is not None and [t.content for t in survivor.history] == ["hi"]
    assert store.get_run(other_run) is not None and len(store.run_events(other_run)) >= 1
    assert len(store.list_artifacts(kept.id, 10).items) == 1
    assert store.get_session_state(kept.id) is not None


def test_a_schema_2_database_gains_the_tag_column(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[0] + ";" + MIGRATIONS[1] + ";PRAGMA user_version = 2;")
    conn.execute(
        "INSERT INTO sessions (id, title, status, created_at, updated_at) "
        "VALUES ('ses-old', 'before', 'OPEN', ?, ?)",
        (NOW, NOW),
    )
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    try:
        old = store.get_session("ses-old")
        assert old is not None and (old.title, old.tag) == ("before", None)
        store.create_session(Session("ses-new", "n", SessionStatus.OPEN, NOW, NOW, tag="x"))
        new = store.get_session("ses-new")
        assert new is not None and new.tag == "x"
    finally:
        store.close()
