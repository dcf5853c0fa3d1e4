"""A schedule's trigger history: one record per tick, trigger or backfill run, what it did.

A record has AxonX 0.2.2's fields (``name``, ``job``, ``trigger_id``, ``triggered_at``,
``scheduler_id``, ``state``, ``error``, ``finished_at``, ``result``: the answer of the
submit, a TaskHandle) and runyard's: the ``tick`` it stands for, its ``kind`` (``tick``,
``catch_up``, ``trigger``, ``backfill``), the ``outcome`` (``submitted``, ``skipped``,
``failed``) with its ``reason``, and the ``task_id``/``run_id`` it made. ``state`` is the
submit's, as AxonX records its Job call: ``succeeded``, ``failed``, or ``skipped``.

Records finished more than ``history_retention_days`` ago are pruned whenever the history
is written, and at most the newest :data:`MAX_RECORDS` are kept.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from uuid import uuid4

from pydantic import BaseModel, ConfigDict

from runyard.schedules.cron import iso_utc

Outcome = Literal["submitted", "skipped", "failed"]
Kind = Literal["tick", "catch_up", "trigger", "backfill"]
STATE_OF = {"submitted": "succeeded", "skipped": "skipped", "failed": "failed"}
MAX_ERROR = 2000
# each trigger rewrites the whole file: an every-minute schedule kept for years must not
# make that a write of hundreds of megabytes
MAX_RECORDS = 10_000


class TriggerRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    job: str
    trigger_id: str
    triggered_at: str
    scheduler_id: str | None = None
    state: str
    error: str = ""
    finished_at: str | None = None
    result: Any = None
    tick: str | None = None
    kind: Kind = "tick"
    outcome: Outcome
    reason: str = ""
    task_id: str | None = None
    run_id: str | None = None


def new_record(
    name: str,
    job: str,
    scheduler_id: str,
    now: datetime,
    tick: datetime | None,
    kind: Kind,
) -> dict[str, Any]:
    """A record of a trigger that has not done anything yet (see :func:`settle`)."""
    return {
        "name": name, "job": job, "trigger_id": uuid4().hex, "triggered_at": iso_utc(now),
        "scheduler_id": scheduler_id, "tick": iso_utc(tick) if tick is not None else None,
        "kind": kind,
    }  # fmt: skip


def settle(
    record: dict[str, Any],
    outcome: Outcome,
    now: datetime,
    *,
    reason: str = "",
    handle: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The record with what the trigger did; a checked copy (TriggerRecord's fields)."""
    done = {
        **record, "outcome": outcome, "state": STATE_OF[outcome], "finished_at": iso_utc(now),
        "reason": reason[:MAX_ERROR], "error": reason[:MAX_ERROR] if outcome == "failed" else "",
        "result": handle, "task_id": (handle or {}).get("task_id"),
        "run_id": (handle or {}).get("run_id"),
    }  # fmt: skip
    return TriggerRecord.model_validate(done).model_dump(mode="json")


def load_history(raw: object) -> list[dict[str, Any]]:
    """The records of a stored history that still read as records (others are dropped)."""
    kept: list[dict[str, Any]] = []
    for item in raw if isinstance(raw, list) else []:
        try:
            kept.append(TriggerRecord.model_validate(item).model_dump(mode="json"))
        except ValueError:
            continue
    return kept


def prune(records: list[dict[str, Any]], retention_days: int, now: datetime) -> list[dict]:
    """The records finished within the last ``retention_days`` days, the newest
    :data:`MAX_RECORDS` of them at most."""
    cutoff = now - timedelta(days=retention_days)
    return [r for r in records if _finished(r) >= cutoff][-MAX_RECORDS:]


def _finished(record: dict[str, Any]) -> datetime:
    text = record.get("finished_at") or record["triggered_at"]
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
