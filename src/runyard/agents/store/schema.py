"""Versioned migrations of ``state.db``; ``PRAGMA user_version`` holds the applied version.

A migration is appended, never edited: a database at version N runs every migration after
N, each in its own transaction, so an upgrade interrupted half-way resumes where it stopped.
"""

from __future__ import annotations

import sqlite3

from runyard.errors import ConfigError

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
