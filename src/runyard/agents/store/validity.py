"""Which stored records may be used: every id in them one path component.

A store's rows do not all come from this server: a restored backup or an edited
``state.db`` can hold any text. The server builds folders from a record's ids
(``workspaces/<run-id>``, ``session-state/<session-id>``), so each record is checked as
it is read back (:func:`read_record`): one that cannot be read, or whose ids break the rule
of :mod:`runyard.agents.ids`, is left out with a warning that names it — a lookup finds
nothing (404), a list skips it, a queued run in it is never started. A record added with
such an id is refused (:func:`require_valid`). :mod:`runyard.backup` applies the same
check (:func:`record_problem`) to the store inside an archive.

    problem = record_problem(run)        # None, or what is wrong, in words
    session = read_record(convert, row, "sessions")   # None when refused (and logged)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from runyard.agents.errors import AgentInvalid
from runyard.agents.ids import check_agent_id, check_stored_name
from runyard.agents.models import (
    Artifact,
    HistoryEntry,
    MountGrant,
    Run,
    RunEvent,
    Session,
    SessionState,
)

log = logging.getLogger("runyard.agents.store")
T = TypeVar("T")


def record_problem(record: object) -> str | None:
    """What is wrong with the ids (and a grant's host path) of ``record``; None: nothing."""
    check = CHECKS.get(type(record))
    if check is None:
        return None
    try:
        check(record)
    except AgentInvalid as exc:
        return str(exc)
    return None


def require_valid(record: T) -> T:
    """``record`` when :func:`record_problem` finds nothing; :class:`AgentInvalid` else."""
    problem = record_problem(record)
    if problem is not None:
        log.warning("a %s record was refused: %s", type(record).__name__, problem)
        raise AgentInvalid(problem)
    return record


def read_record(convert: Callable[[Any], T], row: Any, table: str) -> T | None:
    """``row`` of ``table`` as a record, or None (with a warning) when it is not usable."""
    try:
        record = convert(row)
    except (ValueError, TypeError, KeyError) as exc:  # a bad state, JSON or column
        problem = f"it cannot be read ({type(exc).__name__}: {exc})"
    else:
        problem = record_problem(record)
        if problem is None:
            return record
    ident = row.get("id", row.get("session_id", "?")) if isinstance(row, dict) else "?"
    log.warning("state.db: row %r of %s is left out: %s", ident, table, problem)
    return None


def usable(records: Iterable[T | None]) -> list[T]:
    return [record for record in records if record is not None]


def _optional(value: object, kind: str) -> None:
    if value is not None:
        check_agent_id(value, kind)


def _ids(values: object, kind: str) -> None:
    if not isinstance(values, list):
        raise AgentInvalid(f"the {kind} ids are not a list: {values!r}")
    for value in values:
        check_agent_id(value, kind)


def _session(session: Session) -> None:
    check_agent_id(session.id, "session")
    _optional(session.latest_run_id, "run")
    for turn in session.history:
        _turn(turn)
    for kind, key in (("session", "sessionId"), ("run", "runId")):
        if session.forked_from is not None:
            check_agent_id(session.forked_from.get(key), kind)


def _turn(turn: HistoryEntry) -> None:
    _optional(turn.run_id, "run")


def _artifact(artifact: Artifact) -> None:
    check_agent_id(artifact.id, "artifact")
    check_agent_id(artifact.session_id, "session")
    check_stored_name(artifact.stored_name)


def _grant(grant: MountGrant) -> None:
    check_agent_id(grant.id, "mount grant")
    check_agent_id(grant.session_id, "session")
    check_host_path(grant.host_path, grant.id)


def check_host_path(host_path: object, grant_id: str) -> str:
    """A grant's stored host path: absolute and normalised, as a grant stores it."""
    if (
        not isinstance(host_path, str)
        or "\x00" in host_path
        or not host_path.startswith("/")
        or host_path.startswith("//")
        or os.path.normpath(host_path) != host_path
    ):
        raise AgentInvalid(
            f"Mount grant {grant_id} has host path {host_path!r}: not an absolute, "
            "normalised path (no '..', '.', '//' or trailing '/')"
        )
    return host_path


def _run(run: Run) -> None:
    check_agent_id(run.id, "run")
    check_agent_id(run.session_id, "session")
    _ids(run.artifact_ids, "artifact")
    _ids(run.mount_grant_ids, "mount grant")


def _state(state: SessionState) -> None:
    check_agent_id(state.session_id, "session")
    _optional(state.last_run_id, "run")


def _event(event: RunEvent) -> None:
    check_agent_id(event.run_id, "run")


CHECKS: dict[type, Callable[[Any], None]] = {
    Session: _session,
    HistoryEntry: _turn,
    Artifact: _artifact,
    MountGrant: _grant,
    Run: _run,
    SessionState: _state,
    RunEvent: _event,
}
