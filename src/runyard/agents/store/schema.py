"""Versioned migrations of ``state.db``; ``PRAGMA user_version`` holds the applied version.

A migration is appended, never edited: a database at version N runs every migration after
N, each in its own transaction, so an upgrade interrupted half-way resumes where it stopped.

The mapping between records and rows (column lists, row readers, value writers) lives here
too, beside the tables it reads: a column added by a migration is read in the same module.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from runyard.agents.models import (
    Access,
    Artifact,
    HistoryEntry,
    MountGrant,
    Run,
    RunEvent,
    Session,
    SessionState,
    SessionStatus,
)
from runyard.errors import ConfigError
from runyard.wire import TaskState

MIGRATIONS: tuple[str, ...] = (
    # 1: the records of DESIGN section 6
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        title TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL,
        latest_run_id TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE TABLE history (
        session_id TEXT NOT NULL REFERENCES sessions(id),
        seq INTEGER NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        run_id TEXT,
        created_at TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    );
    CREATE UNIQUE INDEX history_once_per_run ON history(run_id, role) WHERE run_id IS NOT NULL;
    CREATE TABLE artifacts (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id),
        file_name TEXT NOT NULL,
        relative_path TEXT NOT NULL DEFAULT '',
        size INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        media_type TEXT NOT NULL,
        stored_name TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE INDEX artifacts_by_session ON artifacts(session_id);
    CREATE UNIQUE INDEX artifacts_unique_path ON artifacts(session_id, relative_path)
        WHERE relative_path != '';
    CREATE TABLE mount_grants (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id),
        name TEXT NOT NULL,
        host_path TEXT NOT NULL,
        access TEXT NOT NULL,
        created_at TEXT NOT NULL,
        revoked INTEGER NOT NULL DEFAULT 0
    );
    CREATE UNIQUE INDEX grants_active_name ON mount_grants(session_id, name) WHERE revoked = 0;
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id),
        state TEXT NOT NULL,
        user_prompt TEXT NOT NULL,
        system_prompt TEXT NOT NULL DEFAULT '',
        package TEXT NOT NULL DEFAULT '',
        artifact_ids TEXT NOT NULL DEFAULT '[]',
        mount_grant_ids TEXT NOT NULL DEFAULT '[]',
        created_at TEXT NOT NULL,
        started_at TEXT,
        finished_at TEXT,
        exit_code INTEGER,
        error TEXT NOT NULL DEFAULT '',
        isolation TEXT NOT NULL DEFAULT '',
        token_hash TEXT NOT NULL DEFAULT '',
        handle TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX runs_by_session ON runs(session_id);
    CREATE INDEX runs_active ON runs(state) WHERE state IN ('queued', 'running');
    CREATE INDEX runs_by_token ON runs(token_hash) WHERE token_hash != '';
    CREATE TABLE run_events (
        run_id TEXT NOT NULL REFERENCES runs(id),
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        data TEXT NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    CREATE TABLE session_state (
        session_id TEXT PRIMARY KEY REFERENCES sessions(id),
        path TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        last_run_id TEXT,
        run_count INTEGER NOT NULL DEFAULT 0
    );
    """,
    # 2: session checkpoints — a run's snapshot record, a session's fork origin; history
    # turns are unique per session (a fork copies its origin's turns with their run ids)
    """
    ALTER TABLE runs ADD COLUMN checkpoint TEXT NOT NULL DEFAULT '';
    ALTER TABLE sessions ADD COLUMN forked_from TEXT NOT NULL DEFAULT '';
    DROP INDEX history_once_per_run;
    CREATE UNIQUE INDEX history_once_per_run ON history(session_id, run_id, role)
        WHERE run_id IS NOT NULL
    """,
    # 3: a session's tag (AxonX's tag_agent_session); NULL: untagged
    """
    ALTER TABLE sessions ADD COLUMN tag TEXT
    """,
)


def schema_version(conn: sqlite3.Connection) -> int:
    cursor = conn.cursor()
    cursor.row_factory = None
    return int(cursor.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection) -> int:
    """Apply every pending migration; returns the resulting version."""
    current = schema_version(conn)
    if current > len(MIGRATIONS):
        raise ConfigError(
            f"state.db is at schema version {current}, newer than this runyard "
            f"({len(MIGRATIONS)}); upgrade runyard"
        )
    for version, script in enumerate(MIGRATIONS[current:], start=current + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if schema_version(conn) >= version:  # another process got here first
                conn.execute("ROLLBACK")
                continue
            for statement in _statements(script):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return schema_version(conn)


def _statements(script: str) -> list[str]:
    return [part.strip() for part in script.split(";") if part.strip()]


Row = dict[str, Any]

RUN_COLUMNS = (
    "id, session_id, state, user_prompt, system_prompt, package, artifact_ids, "
    "mount_grant_ids, created_at, started_at, finished_at, exit_code, error, isolation, "
    "token_hash, handle, checkpoint"
)
ARTIFACT_COLUMNS = (
    "id, session_id, file_name, relative_path, size, sha256, media_type, created_at, stored_name"
)
GRANT_COLUMNS = "id, session_id, name, host_path, access, created_at, revoked"
SESSION_COLUMNS = "id, title, status, created_at, updated_at, latest_run_id, forked_from, tag"
STATE_COLUMNS = "session_id, path, created_at, updated_at, last_run_id, run_count"


def session_from_row(row: Row, history: list[HistoryEntry]) -> Session:
    return Session(
        id=row["id"],
        title=row["title"],
        status=SessionStatus(row["status"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        latest_run_id=row["latest_run_id"],
        history=history,
        forked_from=json.loads(row["forked_from"]) if row["forked_from"] else None,
        tag=row["tag"],
    )


def history_from_row(row: Row) -> HistoryEntry:
    return HistoryEntry(row["role"], row["content"], row["run_id"], row["created_at"])


def artifact_from_row(row: Row) -> Artifact:
    return Artifact(**{key: row[key] for key in row})


def grant_from_row(row: Row) -> MountGrant:
    values = {key: row[key] for key in row}
    values["access"] = Access(values["access"])
    values["revoked"] = bool(values["revoked"])
    return MountGrant(**values)


def run_from_row(row: Row) -> Run:
    values = {key: row[key] for key in row}
    values["state"] = TaskState(values["state"])
    for key in ("artifact_ids", "mount_grant_ids", "handle"):
        values[key] = json.loads(values[key])
    values["checkpoint"] = json.loads(values["checkpoint"]) if values["checkpoint"] else None
    return Run(**values)


def run_values(run: Run) -> tuple[Any, ...]:
    return (
        run.id, run.session_id, run.state.value, run.user_prompt, run.system_prompt,
        run.package, json.dumps(run.artifact_ids), json.dumps(run.mount_grant_ids),
        run.created_at, run.started_at, run.finished_at, run.exit_code, run.error,
        run.isolation, run.token_hash, json.dumps(run.handle), checkpoint_value(run.checkpoint),
    )  # fmt: skip


def checkpoint_value(checkpoint: dict[str, Any] | None) -> str:
    """The column text of a run's checkpoint record (JSON; ``state`` is present|skipped|pruned)."""
    if checkpoint is None:
        return ""
    return json.dumps(checkpoint, ensure_ascii=False)


def forked_from_value(forked_from: dict[str, str] | None) -> str:
    return "" if forked_from is None else json.dumps(forked_from)


def event_from_row(row: Row) -> RunEvent:
    return RunEvent(
        row["run_id"], row["seq"], row["kind"], json.loads(row["data"]), row["created_at"]
    )


def state_from_row(row: Row) -> SessionState:
    return SessionState(**{key: row[key] for key in row})
