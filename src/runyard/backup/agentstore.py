"""Checking the agent store inside an archive (``workspace/agent/state.db``) before restore.

    problems = store_problems(Path("/tmp/copy-of-state.db"), [Path("/srv/data")])

The database is a private copy taken from the archive: it is brought to the current
schema (a backup of an older runyard is still read), then every row is read the way the
server reads it back (:func:`runyard.agents.store.validity.record_problem`): each
session, run, artifact and grant id one path component, each stored upload name one
file name, each grant's host path absolute and normalised. A grant that is not revoked
must also lie inside one of ``allowed_mount_roots`` (those of the settings the command
reads): a restored store must not name host folders this server was never told it may
mount. Revoked grants are never mounted, so their host paths need only be well formed.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from runyard.agents.models import MountGrant
from runyard.agents.store import schema
from runyard.agents.store.validity import record_problem
from runyard.errors import ConfigError

STORE_NAME = "workspace/agent/state.db"
SHOWN_PER_TABLE = 20  # a hostile store can hold millions of bad rows: the first ones say it

Convert = Callable[[dict[str, Any]], Any]


def _session(row: dict[str, Any]) -> Any:
    return schema.session_from_row(row, [])  # its turns are read from their own table


TABLES: tuple[tuple[str, str, Convert], ...] = (
    ("sessions", schema.SESSION_COLUMNS, _session),
    ("history", "role, content, run_id, created_at", schema.history_from_row),
    ("artifacts", schema.ARTIFACT_COLUMNS, schema.artifact_from_row),
    ("mount_grants", schema.GRANT_COLUMNS, schema.grant_from_row),
    ("runs", schema.RUN_COLUMNS, schema.run_from_row),
    ("session_state", schema.STATE_COLUMNS, schema.state_from_row),
    ("run_events", "run_id, seq, kind, data, created_at", schema.event_from_row),
)


def store_problems(db_path: Path, allowed_mount_roots: Sequence[Path]) -> list[str]:
    """Every way the store at ``db_path`` (a private copy: it is migrated) is unsafe."""
    try:
        conn = _open(db_path)
    except (sqlite3.Error, ConfigError) as exc:
        return [f"{STORE_NAME}: cannot be read as the agent store: {exc}"]
    roots = _real_roots(allowed_mount_roots)
    problems: list[str] = []
    try:
        for table, columns, convert in TABLES:
            found = _table_problems(conn, table, columns, convert, roots)
            problems += found[:SHOWN_PER_TABLE]
            if len(found) > SHOWN_PER_TABLE:
                problems.append(f"{STORE_NAME}: {len(found) - SHOWN_PER_TABLE} more in {table}")
    except sqlite3.Error as exc:
        problems.append(f"{STORE_NAME}: cannot be read as the agent store: {exc}")
    finally:
        conn.close()
    return problems


def _open(db_path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        # the archive's schema runs nothing of its own (views, triggers) with unsafe functions
        conn.execute("PRAGMA trusted_schema = OFF")
        schema.migrate(conn)
    except BaseException:
        conn.close()
        raise
    conn.row_factory = _dict_row
    return conn


def _table_problems(
    conn: sqlite3.Connection, table: str, columns: str, convert: Convert, roots: list[Path]
) -> list[str]:
    problems = []
    for row in _rows(conn, table, columns):
        problem = _row_problem(row, convert, roots)
        if problem is not None:
            ident = row.get("id", row.get("session_id", row.get("run_id")))
            problems.append(f"{STORE_NAME}: {table} row {ident!r}: {problem}")
    return problems


def _rows(conn: sqlite3.Connection, table: str, columns: str) -> Iterator[dict[str, Any]]:
    yield from conn.execute(f"SELECT {columns} FROM {table}")  # names from TABLES only


def _row_problem(row: dict[str, Any], convert: Convert, roots: list[Path]) -> str | None:
    try:
        record = convert(row)
    except (ValueError, TypeError, KeyError) as exc:
        return f"cannot be read ({type(exc).__name__}: {exc})"
    problem = record_problem(record)
    if problem is None and isinstance(record, MountGrant) and not record.revoked:
        problem = _outside_roots(record, roots)
    return problem


def _outside_roots(grant: MountGrant, roots: list[Path]) -> str | None:
    host = Path(grant.host_path)
    if any(host == root or host.is_relative_to(root) for root in roots):
        return None
    shown = ", ".join(str(root) for root in roots) or "none are configured"
    return (
        f"active mount grant of host folder {grant.host_path!r}, outside the allowed mount "
        f"roots ({shown}): set allowed_mount_roots for the restored server first"
    )


def _real_roots(roots: Sequence[Path]) -> list[Path]:
    return [Path(os.path.realpath(root)) for root in roots]


def _dict_row(cursor: sqlite3.Cursor, values: tuple[Any, ...]) -> dict[str, Any]:
    return {column[0]: value for column, value in zip(cursor.description, values, strict=True)}
