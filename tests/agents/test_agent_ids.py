"""Session, run, artifact and grant ids are one path component wherever they are read: the
layout refuses to build a path from any other, both stores refuse to add one, the SQLite
store leaves out rows an edited or restored ``state.db`` holds, and a running service on
such a store never touches the host folder the ids climb to. A grant's host path is
checked again when its run is launched."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from agent_helpers import start, wait_done

from runyard.agents.errors import AgentInvalid, InvalidAgentId
from runyard.agents.ids import check_agent_id, is_agent_id
from runyard.agents.layout import AgentLayout, Ownership
from runyard.agents.models import (
    Access,
    Artifact,
    HistoryEntry,
    MountGrant,
    Run,
    Session,
    SessionState,
    SessionStatus,
    new_id,
)
from runyard.agents.runs import RunRequest
from runyard.agents.snapshots import Snapshots
from runyard.agents.store import AgentStore, MemoryStore, SQLiteStore
from runyard.api.agentservice import AgentService
from runyard.wire import TaskState

NOW = "2026-01-01T00:00:00.000000Z"
BAD_IDS = ["", ".", "..", "../../x", "a/b", "/abs", "a\x00b", "x" * 65, "a b", "ses\n"]


def sentinel_folder(root: Path) -> Path:
    """A host folder outside the workspace: mode 0700 with one file."""
    folder = root / "sentinel"
    folder.mkdir(mode=0o700)
    folder.chmod(0o700)
    (folder / "keep.txt").write_text("host data")
    return folder


def state_of(folder: Path) -> tuple[int, list[str], str]:
    mode = stat.S_IMODE(folder.lstat().st_mode)
    return mode, sorted(os.listdir(folder)), (folder / "keep.txt").read_text()


def test_ids_runyard_makes_pass_and_others_do_not() -> None:
    for kind in ("ses", "run", "art", "mnt"):
        assert is_agent_id(new_id(kind))
    for bad in BAD_IDS:
        assert not is_agent_id(bad), bad
        with pytest.raises(InvalidAgentId, match="an id is 1-64 letters, digits"):
            check_agent_id(bad, "session")


@pytest.mark.parametrize("bad", BAD_IDS)
def test_the_layout_builds_no_path_from_a_bad_id(tmp_path: Path, bad: str) -> None:
    layout = AgentLayout(tmp_path / "ws" / "agent", tmp_path / "logs")
    layout.ensure()
    sentinel = sentinel_folder(tmp_path)
    before = state_of(sentinel)
    calls: list[Callable[[str], object]] = [
        layout.run_dir, layout.state_dir, layout.log_path, layout.exit_file,
        lambda ident: layout.run_subdir(ident, "out"),
        lambda ident: layout.create_run_dirs(ident, Ownership()),
        lambda ident: layout.ensure_state_dirs(ident, Ownership()),
        lambda ident: layout.clear_tmp(ident),
        Snapshots(layout.root / "snapshots", 1 << 20, 3).session_dir,
        lambda ident: Snapshots(layout.root / "snapshots", 1 << 20, 3).snapshot_dir("s", ident),
    ]  # fmt: skip
    for call in calls:
        with pytest.raises(InvalidAgentId):
            call(bad)
    with pytest.raises(InvalidAgentId, match="stored upload"):
        layout.upload_path("../../sentinel/keep.txt")
    assert state_of(sentinel) == before


def test_a_session_id_climbing_to_a_host_folder_leaves_it_alone(tmp_path: Path) -> None:
    """The reported escape: session-state/<id> made group-writable (2770) for the run."""
    layout = AgentLayout(tmp_path / "ws" / "agent", tmp_path / "logs")
    layout.ensure()
    sentinel = sentinel_folder(tmp_path)
    before = state_of(sentinel)
    climb = os.path.relpath(sentinel, layout.session_states)
    assert (layout.session_states / climb).resolve() == sentinel.resolve()
    with pytest.raises(InvalidAgentId, match="Invalid session id"):
        layout.ensure_state_dirs(climb, Ownership())
    assert state_of(sentinel) == before


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AgentStore]:
    made: AgentStore = (
        SQLiteStore(tmp_path / "state.db") if request.param == "sqlite" else MemoryStore()
    )
    yield made
    made.close()


def test_both_stores_refuse_records_with_bad_ids(store: AgentStore) -> None:
    good = new_id("ses")
    store.create_session(Session(good, "t", SessionStatus.OPEN, NOW, NOW))
    refused: list[Callable[[], object]] = [
        lambda: store.create_session(Session("../x", "t", SessionStatus.OPEN, NOW, NOW)),
        lambda: store.add_run(Run("run/x", good, TaskState.QUEUED, "p", NOW), exclusive=False),
        lambda: store.add_run(
            Run(new_id("run"), good, TaskState.QUEUED, "p", NOW, artifact_ids=[".."]),
            exclusive=False,
        ),
        lambda: store.add_artifact(
            Artifact(new_id("art"), good, "a", "", 1, "ab" * 32, "text/csv", NOW, "../../x")
        ),
        lambda: store.add_grant(MountGrant(new_id("mnt"), good, "d", "srv", Access.RO, NOW)),
        lambda: store.add_grant(MountGrant(new_id("mnt"), good, "d", "/a/../b", Access.RO, NOW)),
        lambda: store.ensure_session_state(SessionState("..", "/x", NOW, NOW)),
        lambda: store.append_history(good, HistoryEntry("user", "q", "../r", NOW)),
    ]
    for add in refused:
        with pytest.raises(AgentInvalid):
            add()
    assert [s.id for s in store.list_sessions(10).items] == [good]
    assert store.list_runs(None, 10).items == []


def test_sqlite_leaves_out_rows_an_edited_database_holds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.db"
    store = SQLiteStore(path)
    ses, other, run, art, mnt = (new_id(k) for k in ("ses", "ses", "run", "art", "mnt"))
    store.create_session(Session(ses, "t", SessionStatus.OPEN, NOW, NOW))
    store.create_session(Session(other, "kept", SessionStatus.OPEN, NOW, NOW))
    store.add_run(Run(run, ses, TaskState.QUEUED, "p", NOW), exclusive=True)
    store.add_artifact(Artifact(art, ses, "a", "", 1, "ab" * 32, "text/csv", NOW, art))
    store.add_grant(MountGrant(mnt, ses, "d", "/srv/d", Access.RO, NOW))
    store.close()
    conn = sqlite3.connect(path)
    for table in ("runs", "artifacts", "mount_grants", "history"):
        conn.execute(f"UPDATE {table} SET session_id = '../../x' WHERE session_id = ?", (ses,))
    conn.execute("UPDATE sessions SET id = '../../x' WHERE id = ?", (ses,))
    conn.execute("UPDATE runs SET id = 'run/../x' WHERE id = ?", (run,))
    conn.execute("UPDATE artifacts SET session_id = ?, stored_name = '../../x' ", (other,))
    conn.execute("UPDATE mount_grants SET session_id = ?, host_path = '/srv/../etc'", (other,))
    conn.commit()
    conn.close()
    reopened = SQLiteStore(path)
    caplog.set_level(logging.WARNING, logger="runyard.agents.store")
    try:
        assert reopened.get_session("../../x") is None
        assert [s.id for s in reopened.list_sessions(10).items] == [other]
        assert reopened.get_run("run/../x") is None
        assert reopened.active_runs() == [] and reopened.list_runs(None, 10).items == []
        assert reopened.get_artifact(art) is None
        assert reopened.list_artifacts(other, 10).items == []
        assert reopened.get_grant(mnt) is None and reopened.list_grants(other, 10).items == []
    finally:
        reopened.close()
    logged = caplog.text
    assert "row '../../x' of sessions is left out" in logged
    assert "row 'run/../x' of runs is left out" in logged
    assert "stored upload" in logged and "not an absolute, normalised path" in logged


def edited(db: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    conn = sqlite3.connect(db, timeout=30)
    for sql, params in statements:
        conn.execute(sql, params)
    conn.commit()
    conn.close()


def test_a_service_on_an_edited_store_never_touches_the_host_folder(
    tmp_path: Path, make_service: Callable[..., AgentService]
) -> None:
    """A queued run in a session whose id climbs to a host folder: the first server on the
    store would start it and make that folder the run's group-writable state folder."""
    sentinel = sentinel_folder(tmp_path)
    before = state_of(sentinel)
    agent_root = tmp_path / "ws" / "agent"
    agent_root.mkdir(parents=True)
    SQLiteStore(agent_root / "state.db").close()
    climb = os.path.relpath(sentinel, agent_root / "session-state")
    edited(
        agent_root / "state.db",
        ("INSERT INTO sessions (id, title, status, created_at, updated_at) "
         "VALUES (?, 'evil', 'OPEN', ?, ?)", (climb, NOW, NOW)),
        ("INSERT INTO runs (id, session_id, state, user_prompt, package, created_at) "
         "VALUES (?, ?, 'queued', 'answer hi', 'probe', ?)", (new_id("run"), climb, NOW)),
    )  # fmt: skip
    service = make_service("none")
    time.sleep(0.5)  # a dispatched run would have made its state folder by now
    assert state_of(sentinel) == before
    assert service.catalog.list_sessions(None, None).items == []
    assert service.store.active_runs() == []
    with pytest.raises(InvalidAgentId, match="Invalid session id"):
        service.catalog.session(climb)
    with pytest.raises(InvalidAgentId):
        service.runs.create(RunRequest(climb, "answer hi", package="probe"))
    assert state_of(sentinel) == before


def test_a_grant_moved_outside_the_roots_is_refused_at_creation_and_at_launch(
    tmp_path: Path, make_service: Callable[..., AgentService]
) -> None:
    allowed = tmp_path / "allowed"
    (allowed / "data").mkdir(parents=True)
    sentinel = sentinel_folder(tmp_path)
    before = state_of(sentinel)
    service = make_service("none", allowed_mount_roots=[allowed])
    session = service.catalog.create_session("grants").id
    grant = service.catalog.create_grant(session, "data", str(allowed / "data"), "rw", None)
    first = start(service, session, "sleep 1\nanswer one", mount_grant_ids=[])
    waiting = start(service, session, "answer two", mount_grant_ids=[grant.id], enqueue=True)
    assert waiting.state == TaskState.QUEUED
    db = tmp_path / "ws" / "agent" / "state.db"
    edited(db, ("UPDATE mount_grants SET host_path = ? WHERE id = ?", (str(sentinel), grant.id)))
    with pytest.raises(AgentInvalid, match="outside the allowed roots"):
        start(service, session, "answer three", mount_grant_ids=[grant.id], enqueue=True)
    assert wait_done(service, first.id).state == TaskState.SUCCEEDED
    ended = wait_done(service, waiting.id)
    assert ended.state == TaskState.FAILED and "outside the allowed roots" in ended.error
    assert state_of(sentinel) == before
