"""A schedule as answers show it: AxonX 0.2.2's ``list_schedules`` shape plus runyard's.

AxonX's fields: ``scheduler_id``, ``name``, ``job``, ``description``, ``cron``,
``timezone``, ``arguments``, ``concurrency_policy``, ``next_run_at`` (ISO-8601 in the
schedule's zone; None while paused), ``running`` (runs it submitted still active),
``last_trigger`` (its ``result`` left out unless history is asked for) and, with
``include_history``, ``history`` (the last ``history_limit`` records, oldest first),
``history_total`` and ``history_scheduler_ids``. runyard adds ``backend``, ``task``,
``paused``, ``catch_up``, ``tick_argument``, ``history_retention_days``, ``origin``
(``config`` or ``api``) and ``last_tick``.
"""

from __future__ import annotations

from copy import deepcopy
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from runyard.schedules.cron import next_tick
from runyard.schedules.scheduler import Entry, Scheduler

MAX_HISTORY_LIMIT = 200


def describe(
    scheduler: Scheduler,
    entry: Entry,
    *,
    include_history: bool = False,
    history_limit: int = 20,
    now: datetime | None = None,
) -> dict[str, Any]:
    s, state = entry.settings, entry.state
    history = state.history
    last = deepcopy(history[-1]) if history else None
    if last is not None and not include_history:
        last.pop("result", None)
    answer: dict[str, Any] = {
        "scheduler_id": entry.scheduler_id, "name": entry.name, "job": s.job,
        "description": s.description or f"Runs the task {s.task} on {s.cron!r}",
        "cron": s.cron, "timezone": s.timezone, "arguments": deepcopy(s.arguments),
        "concurrency_policy": s.concurrency_policy,
        "next_run_at": None if state.paused else _next_run(entry, now),
        "running": scheduler.running(entry), "last_trigger": last,
        "backend": s.backend, "task": s.task, "paused": state.paused, "catch_up": s.catch_up,
        "tick_argument": s.tick_argument, "history_retention_days": s.history_retention_days,
        "origin": entry.origin, "last_tick": state.last_tick,
    }  # fmt: skip
    if include_history:
        answer["history"] = deepcopy(history[-history_limit:])
        answer["history_total"] = len(history)
        answer["history_scheduler_ids"] = sorted(
            {r["scheduler_id"] for r in history if r.get("scheduler_id") and r["job"] == s.job}
        )
    return answer


def _next_run(entry: Entry, now: datetime | None) -> str:
    s = entry.settings
    moment = now or datetime.now(ZoneInfo(s.timezone))
    last = entry.state.last_tick
    after = max(moment, datetime.fromisoformat(last.replace("Z", "+00:00"))) if last else moment
    return next_tick(s.cron, s.timezone, after).astimezone(ZoneInfo(s.timezone)).isoformat()


def describe_all(
    scheduler: Scheduler,
    name: str | None = None,
    include_history: bool = False,
    history_limit: int = 20,
) -> list[dict[str, Any]]:
    """The ``list_schedules`` answer: every schedule by name, or the one named (an empty
    list when there is none, as AxonX answers)."""
    with scheduler.lock:
        names = scheduler.names() if name is None else [n for n in scheduler.names() if n == name]
        return [
            describe(scheduler, scheduler.entry(n), include_history=include_history,
                     history_limit=history_limit)
            for n in names
        ]  # fmt: skip
