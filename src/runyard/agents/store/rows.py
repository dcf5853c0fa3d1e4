"""Rows of ``state.db`` to records and back (the SQLite store's one mapping place)."""

from __future__ import annotations

import json
from typing import Any

from runyard.agents.models import (
    Access,
    Artifact,
    HistoryEntry,
    MountGrant,
    Run,
    RunEvent,
    RunState,
    Session,
    SessionState,
    SessionStatus,
)

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
SESSION_COLUMNS = "id, title, status, created_at, updated_at, latest_run_id, forked_from"
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
    values["state"] = RunState(values["state"])
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
