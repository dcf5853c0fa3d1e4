"""The SQLite store: ``<workspace>/agent/state.db`` in WAL mode, one transaction per call.

Rows are read back through :func:`runyard.agents.store.validity.read_record`: a row whose
ids are not one path component (a restored or edited database) is left out with a
warning, and a record with such ids is refused when added.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from runyard.agents.errors import AgentConflict, AgentNotFound, BadRequest, RunActive
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
    paths_overlap,
)
from runyard.agents.store import schema
from runyard.agents.store.base import AgentStore, state_event
from runyard.agents.store.validity import read_record, require_valid, usable
from runyard.errors import InsufficientStorage
from runyard.faults import fault_point
from runyard.wire import TaskState
from runyard.workspace.space import is_space_error

ACTIVE = "('queued', 'running')"
STATES = frozenset(state.value for state in TaskState)
SUMMARY_BATCH = 500  # session ids per query, well below SQLite's bound on parameters


MAX_ROWID = (1 << 63) - 1


def parse_cursor(cursor: str | None) -> int | None:
    if cursor is None or cursor == "":
        return None
    # ASCII digits only ("²".isdigit() is true), and a rowid SQLite can compare with
    if cursor.isascii() and cursor.isdigit() and len(cursor) <= 19 and int(cursor) <= MAX_ROWID:
        return int(cursor)
    shown = cursor if len(cursor) <= 40 else cursor[:40] + "..."
    raise BadRequest(f"Invalid cursor {shown!r}: pass back a nextCursor you were given")


class SQLiteStore(AgentStore):
    """The store on one database file. On a full disk, where even opening it for writing
    fails (SQLite grows its ``-shm`` file), an existing database whose WAL holds nothing
    opens ``read_only`` as the file is: reads answer, every change raises
    :class:`InsufficientStorage` (507), until :meth:`reopen` succeeds."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        self._lock = threading.RLock()
        self.full_disk: sqlite3.OperationalError | None = None  # why it is read-only
        try:
            self._conn = self._connect()
        except sqlite3.OperationalError as exc:
            if not self._whole_in_file(exc):
                raise
            self._conn = self._connect_as_is()
            self.full_disk = exc

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                               timeout=30.0)  # fmt: skip
        try:
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            schema.migrate(conn)
        except BaseException:
            conn.close()
            raise
        conn.row_factory = _dict_row
        return conn

    def _whole_in_file(self, exc: sqlite3.OperationalError) -> bool:
        """A full disk, and no WAL beside the database, or an empty one: the file alone
        (none, or an empty one, on a disk that was full before it was ever written) holds
        every row, so reading it as it is misses nothing."""
        if self.path == ":memory:" or not is_space_error(exc):
            return False
        try:
            return os.path.getsize(self.path + "-wal") == 0
        except FileNotFoundError:
            return True
        except OSError:
            return False

    def _connect_as_is(self) -> sqlite3.Connection:
        try:
            empty = os.path.getsize(self.path) == 0
        except FileNotFoundError:
            empty = True
        if empty:  # nothing was ever stored: empty tables in memory answer the same
            conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            schema.migrate(conn)
        else:  # immutable: no lock, no -shm, no WAL; nobody else can write on this disk
            uri = Path(os.path.abspath(self.path)).as_uri() + "?immutable=1"
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # it reads, or raises
        conn.execute("PRAGMA query_only=ON")
        conn.row_factory = _dict_row
        return conn

    def reopen(self) -> None:
        with self._lock:
            if not self.read_only:
                return
            old, self._conn = self._conn, self._connect()
            self.full_disk = None
        old.close()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self.read_only:
                raise InsufficientStorage(
                    "The agent store is read-only: the disk was full when it was opened; "
                    "nothing can change until space is freed"
                )
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            fault_point("sqlite.commit")
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error:  # a full disk: leave no transaction open behind us
                with suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                raise

    def _one(self, sql: str, params: tuple[Any, ...] = ()) -> dict[str, Any] | None:
        with self._lock:
            row: dict[str, Any] | None = self._conn.execute(sql, params).fetchone()
            return row

    def _page(
        self, table: str, columns: str, where: str, params: tuple[Any, ...],
        limit: int, cursor: str | None, convert: Callable[[dict[str, Any]], Any],
    ) -> Page:  # fmt: skip
        after = parse_cursor(cursor)
        clause = f"WHERE {where}" if where else "WHERE 1"
        if after is not None:
            clause += " AND rowid < ?"
            params = (*params, after)
        sql = f"SELECT rowid AS _rowid, {columns} FROM {table} {clause} ORDER BY rowid DESC LIMIT ?"
        with self._lock:
            found = self._conn.execute(sql, (*params, limit + 1)).fetchall()
        more = len(found) > limit
        found = found[:limit]
        items = usable(read_record(convert, _without_rowid(row), table) for row in found)
        return Page(items, str(found[-1]["_rowid"]) if more else None)

    # sessions
    def create_session(self, session: Session) -> None:
        require_valid(session)
        with self._tx() as conn:
            conn.execute(
                f"INSERT INTO sessions ({schema.SESSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (session.id, session.title, session.status.value, session.created_at,
                 session.updated_at, session.latest_run_id,
                 schema.forked_from_value(session.forked_from), session.tag),
            )  # fmt: skip
            for entry in session.history:  # a fork starts with its origin's turns
                _append_history(conn, session.id, entry)

    def get_session(self, session_id: str) -> Session | None:
        with self._lock:
            sql = f"SELECT {schema.SESSION_COLUMNS} FROM sessions WHERE id = ?"
            row = self._one(sql, (session_id,))
            return None if row is None else read_record(self._with_history, row, "sessions")

    def _with_history(self, row: dict[str, Any]) -> Session:
        turns = self._conn.execute(
            "SELECT role, content, run_id, created_at FROM history WHERE session_id = ? "
            "ORDER BY seq",
            (row["id"],),
        ).fetchall()
        return schema.session_from_row(row, [schema.history_from_row(turn) for turn in turns])

    def list_sessions(self, limit: int, cursor: str | None = None) -> Page:
        with self._lock:
            return self._page(
                "sessions", schema.SESSION_COLUMNS, "", (), limit, cursor, self._with_history
            )

    def set_session_status(
        self, session_id: str, status: SessionStatus, now: str
    ) -> Session | None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE sessions SET status = ?, updated_at = ? WHERE id = ?",
                (status.value, now, session_id),
            )
        return self.get_session(session_id)

    def set_session_labels(
        self, session_id: str, now: str, *, title: str | None = None, tag: str | None = None,
        set_tag: bool = False,
    ) -> Session | None:  # fmt: skip
        with self._tx() as conn:
            if title is not None:
                conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (title, session_id))
            if set_tag:
                conn.execute("UPDATE sessions SET tag = ? WHERE id = ?", (tag, session_id))
            conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, session_id))
        return self.get_session(session_id)

    def delete_session(self, session_id: str) -> SessionRemoval | None:
        with self._tx() as conn:
            found = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,))
            if found.fetchone() is None:
                return None
            active = conn.execute(
                f"SELECT id FROM runs WHERE session_id = ? AND state IN {ACTIVE} LIMIT 1",
                (session_id,),
            ).fetchone()
            if active is not None:
                raise RunActive(session_id, active["id"])
            where = (session_id,)
            runs = conn.execute("SELECT id FROM runs WHERE session_id = ?", where).fetchall()
            names = conn.execute(
                "SELECT stored_name FROM artifacts WHERE session_id = ?", where
            ).fetchall()
            conn.execute(
                "DELETE FROM run_events WHERE run_id IN (SELECT id FROM runs WHERE session_id = ?)",
                where,
            )
            for table in ("runs", "history", "artifacts", "mount_grants", "session_state"):
                conn.execute(f"DELETE FROM {table} WHERE session_id = ?", where)
            conn.execute("DELETE FROM sessions WHERE id = ?", where)
        return SessionRemoval([r["id"] for r in runs], [n["stored_name"] for n in names])

    def append_history(self, session_id: str, entry: HistoryEntry) -> bool:
        require_valid(entry)
        with self._tx() as conn:
            return _append_history(conn, session_id, entry)

    # artifacts
    def add_artifact(self, artifact: Artifact) -> None:
        require_valid(artifact)
        with self._tx() as conn:
            if artifact.relative_path:
                _refuse_overlap(conn, artifact)
            conn.execute(
                f"INSERT INTO artifacts ({schema.ARTIFACT_COLUMNS}) VALUES ({', '.join('?' * 9)})",
                (artifact.id, artifact.session_id, artifact.file_name, artifact.relative_path,
                 artifact.size, artifact.sha256, artifact.media_type, artifact.created_at,
                 artifact.stored_name),
            )  # fmt: skip

    def get_artifact(self, artifact_id: str) -> Artifact | None:
        sql = f"SELECT {schema.ARTIFACT_COLUMNS} FROM artifacts WHERE id = ?"
        row = self._one(sql, (artifact_id,))
        return None if row is None else read_record(schema.artifact_from_row, row, "artifacts")

    def list_artifacts(self, session_id: str, limit: int, cursor: str | None = None) -> Page:
        return self._page(
            "artifacts", schema.ARTIFACT_COLUMNS, "session_id = ?", (session_id,),
            limit, cursor, schema.artifact_from_row,
        )  # fmt: skip

    def stored_names(self) -> set[str]:
        with self._lock:
            found = self._conn.execute("SELECT stored_name FROM artifacts").fetchall()
            return {row["stored_name"] for row in found}

    # mount grants
    def add_grant(self, grant: MountGrant) -> None:
        require_valid(grant)
        with self._tx() as conn:
            try:
                conn.execute(
                    f"INSERT INTO mount_grants ({schema.GRANT_COLUMNS}) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (grant.id, grant.session_id, grant.name, grant.host_path,
                     grant.access.value, grant.created_at, int(grant.revoked)),
                )  # fmt: skip
            except sqlite3.IntegrityError as exc:
                raise AgentConflict(
                    f"Session {grant.session_id} already has an active mount grant named "
                    f"{grant.name!r}; revoke it first or choose another name"
                ) from exc

    def get_grant(self, grant_id: str) -> MountGrant | None:
        sql = f"SELECT {schema.GRANT_COLUMNS} FROM mount_grants WHERE id = ?"
        row = self._one(sql, (grant_id,))
        return None if row is None else read_record(schema.grant_from_row, row, "mount_grants")

    def list_grants(self, session_id: str, limit: int, cursor: str | None = None) -> Page:
        return self._page(
            "mount_grants", schema.GRANT_COLUMNS, "session_id = ?", (session_id,),
            limit, cursor, schema.grant_from_row,
        )  # fmt: skip

    def revoke_grant(self, grant_id: str) -> MountGrant | None:
        with self._tx() as conn:
            conn.execute("UPDATE mount_grants SET revoked = 1 WHERE id = ?", (grant_id,))
        return self.get_grant(grant_id)

    # runs
    def add_run(self, run: Run, *, exclusive: bool) -> None:
        require_valid(run)
        with self._tx() as conn:
            if exclusive:
                active = conn.execute(
                    f"SELECT id FROM runs WHERE session_id = ? AND state IN {ACTIVE} LIMIT 1",
                    (run.session_id,),
                ).fetchone()
                if active is not None:
                    raise RunActive(run.session_id, active["id"])
            placeholders = ", ".join("?" * len(schema.run_values(run)))
            conn.execute(
                f"INSERT INTO runs ({schema.RUN_COLUMNS}) VALUES ({placeholders})",
                schema.run_values(run),
            )
            _event(conn, run.id, "state", state_event(run, run.created_at), run.created_at)

    def get_run(self, run_id: str) -> Run | None:
        row = self._one(f"SELECT {schema.RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,))
        return None if row is None else read_record(schema.run_from_row, row, "runs")

    def list_runs(self, session_id: str | None, limit: int, cursor: str | None = None) -> Page:
        where, params = ("session_id = ?", (session_id,)) if session_id else ("", ())
        return self._page(
            "runs", schema.RUN_COLUMNS, where, params, limit, cursor, schema.run_from_row
        )

    def run_summaries(self, session_ids: list[str]) -> dict[str, RunSummary]:
        found: dict[str, RunSummary] = {}
        for at in range(0, len(session_ids), SUMMARY_BATCH):
            batch = session_ids[at : at + SUMMARY_BATCH]
            marks = ", ".join("?" * len(batch))
            sql = (  # both halves go by the runs_by_session index
                "SELECT session_id, COUNT(*) AS runs, (SELECT state FROM runs AS newest "
                "WHERE newest.session_id = runs.session_id ORDER BY rowid DESC LIMIT 1) AS latest "
                f"FROM runs WHERE session_id IN ({marks}) GROUP BY session_id"
            )
            with self._lock:
                rows = self._conn.execute(sql, batch).fetchall()
            for row in rows:
                latest = TaskState(row["latest"]) if row["latest"] in STATES else None
                found[row["session_id"]] = RunSummary(int(row["runs"]), latest)
        return {ident: found.get(ident, RunSummary()) for ident in session_ids}

    def active_runs(self) -> list[Run]:
        with self._lock:
            found = self._conn.execute(
                f"SELECT {schema.RUN_COLUMNS} FROM runs WHERE state IN {ACTIVE} ORDER BY rowid"
            ).fetchall()
        return usable(read_record(schema.run_from_row, row, "runs") for row in found)

    def run_by_token_hash(self, token_hash: str) -> Run | None:
        if not token_hash:
            return None
        sql = f"SELECT {schema.RUN_COLUMNS} FROM runs WHERE token_hash = ?"
        row = self._one(sql, (token_hash,))
        return None if row is None else read_record(schema.run_from_row, row, "runs")

    def prepare_run(
        self, run_id: str, *, token_hash: str, isolation: str, prompt: HistoryEntry
    ) -> None:
        with self._tx() as conn:
            session_id = _run_session(conn, run_id)
            conn.execute(
                "UPDATE runs SET token_hash = ?, isolation = ? WHERE id = ?",
                (token_hash, isolation, run_id),
            )
            _append_history(conn, session_id, prompt)
            conn.execute(
                "UPDATE sessions SET latest_run_id = ?, updated_at = ? WHERE id = ?",
                (run_id, prompt.created_at, session_id),
            )

    def mark_running(self, run_id: str, *, started_at: str, handle: dict[str, Any]) -> Run:
        with self._tx() as conn:
            changed = conn.execute(
                "UPDATE runs SET state = 'running', started_at = ?, handle = ? "
                "WHERE id = ? AND state = 'queued'",
                (started_at, json.dumps(handle), run_id),
            ).rowcount
            run = _load_run(conn, run_id)
            if changed:
                _event(conn, run_id, "state", state_event(run, started_at), started_at)
        return run

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
        with self._tx() as conn:
            run = _load_run(conn, run_id)
            if run.state.terminal:
                return None
            if answer is not None:
                _append_history(conn, run.session_id, answer)
            conn.execute(
                "UPDATE runs SET state = ?, finished_at = ?, exit_code = ?, error = ? WHERE id = ?",
                (state.value, finished_at, exit_code, error, run_id),
            )
            run = _load_run(conn, run_id)
            _event(conn, run_id, "state", state_event(run, finished_at), finished_at)
        return run

    # checkpoints
    def set_checkpoint(self, run_id: str, checkpoint: dict[str, Any]) -> None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE runs SET checkpoint = ? WHERE id = ?",
                (schema.checkpoint_value(checkpoint), run_id),
            )

    def list_checkpoints(self, session_id: str, limit: int, cursor: str | None = None) -> Page:
        where = "session_id = ? AND json_extract(checkpoint, '$.state') = 'present'"
        where = f"checkpoint != '' AND {where}"
        return self._page(
            "runs", schema.RUN_COLUMNS, where, (session_id,), limit, cursor, schema.run_from_row
        )

    # events
    def add_run_event(self, run_id: str, kind: str, data: dict[str, Any], now: str) -> RunEvent:
        with self._tx() as conn:
            return _event(conn, run_id, kind, data, now)

    def run_events(self, run_id: str, after_seq: int = 0, limit: int = 500) -> list[RunEvent]:
        with self._lock:
            found = self._conn.execute(
                "SELECT run_id, seq, kind, data, created_at FROM run_events "
                "WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (run_id, after_seq, limit),
            ).fetchall()
        return [schema.event_from_row(row) for row in found]

    # session state
    def ensure_session_state(self, state: SessionState) -> SessionState:
        require_valid(state)
        with self._tx() as conn:
            conn.execute(
                f"INSERT OR IGNORE INTO session_state ({schema.STATE_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (state.session_id, state.path, state.created_at, state.updated_at,
                 state.last_run_id, state.run_count),
            )  # fmt: skip
        stored = self.get_session_state(state.session_id)
        if stored is None:  # a stored row that is left out (see the log)
            raise AgentConflict(f"The state record of session {state.session_id} is not usable")
        return stored

    def touch_session_state(self, session_id: str, run_id: str, now: str) -> None:
        with self._tx() as conn:
            conn.execute(
                "UPDATE session_state SET last_run_id = ?, updated_at = ?, "
                "run_count = run_count + 1 WHERE session_id = ?",
                (run_id, now, session_id),
            )

    def get_session_state(self, session_id: str) -> SessionState | None:
        row = self._one(
            f"SELECT {schema.STATE_COLUMNS} FROM session_state WHERE session_id = ?", (session_id,)
        )
        return None if row is None else read_record(schema.state_from_row, row, "session_state")


def _dict_row(cursor: sqlite3.Cursor, values: tuple[Any, ...]) -> dict[str, Any]:
    return {column[0]: value for column, value in zip(cursor.description, values, strict=True)}


def _without_rowid(row: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in row.items() if key != "_rowid"}


def _append_history(conn: sqlite3.Connection, session_id: str, entry: HistoryEntry) -> bool:
    seq = conn.execute(
        "SELECT COALESCE(MAX(seq), 0) + 1 AS next FROM history WHERE session_id = ?", (session_id,)
    ).fetchone()["next"]
    cursor = conn.execute(
        "INSERT OR IGNORE INTO history (session_id, seq, role, content, run_id, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (session_id, seq, entry.role, entry.content, entry.run_id, entry.created_at),
    )
    if cursor.rowcount:
        conn.execute(
            "UPDATE sessions SET updated_at = ? WHERE id = ?", (entry.created_at, session_id)
        )
    return bool(cursor.rowcount)


def _refuse_overlap(conn: sqlite3.Connection, artifact: Artifact) -> None:
    found = conn.execute(
        "SELECT id, relative_path FROM artifacts WHERE session_id = ? AND relative_path != ''",
        (artifact.session_id,),
    ).fetchall()
    for row in found:
        if paths_overlap(row["relative_path"], artifact.relative_path):
            raise AgentConflict(
                f"relativePath {artifact.relative_path!r} collides with "
                f"{row['relative_path']!r} of artifact {row['id']} in this session"
            )


def _run_session(conn: sqlite3.Connection, run_id: str) -> str:
    row = conn.execute("SELECT session_id FROM runs WHERE id = ?", (run_id,)).fetchone()
    if row is None:
        raise AgentNotFound("run", run_id)
    return str(row["session_id"])


def _load_run(conn: sqlite3.Connection, run_id: str) -> Run:
    row = conn.execute(f"SELECT {schema.RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,)).fetchone()
    run = None if row is None else read_record(schema.run_from_row, row, "runs")
    if run is None:
        raise AgentNotFound("run", run_id)
    return run


def _event(
    conn: sqlite3.Connection, run_id: str, kind: str, data: dict[str, Any], now: str
) -> RunEvent:
    seq = conn.execute(
        "SELECT COALESCE(MAX(seq), 0) + 1 AS next FROM run_events WHERE run_id = ?", (run_id,)
    ).fetchone()["next"]
    conn.execute(
        "INSERT INTO run_events (run_id, seq, kind, data, created_at) VALUES (?, ?, ?, ?, ?)",
        (run_id, seq, kind, json.dumps(data, ensure_ascii=False), now),
    )
    return RunEvent(run_id, seq, kind, data, now)
