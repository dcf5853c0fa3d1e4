"""One trigger of a schedule under its concurrency policy: submit, skip, or replace.

- ``allow``: submit.
- ``forbid``: while a run this schedule submitted is queued or running, submit nothing;
  the record says ``skipped`` and names the run.
- ``replace``: cancel the active runs, wait (at most ``cancel_wait`` seconds) until they
  ended, then submit.

The actions reach the server through :class:`Actions` (the supervisor's submit, status and
cancel, in practice), so this module knows nothing of HTTP.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runyard.errors import RunyardError
from runyard.schedule_settings import ScheduleSettings
from runyard.schedules.cron import iso_utc
from runyard.schedules.history import Kind, new_record, settle

ACTIVE = ("queued", "running")
RECENT = 50  # the submitted records looked at for active runs
SUBMITTER_PREFIX = "schedule:"


@dataclass(frozen=True)
class Actions:
    """What a schedule does to tasks: submit one (answers its TaskHandle as JSON), read a
    task's state (None when it is gone) and cancel one."""

    submit: Callable[[str, dict[str, Any], str], dict[str, Any]]
    state_of: Callable[[str], str | None]
    cancel: Callable[[str], bool]


@dataclass(frozen=True)
class Trigger:
    name: str
    settings: ScheduleSettings
    scheduler_id: str
    tick: datetime | None
    kind: Kind
    policy: bool = True  # backfill runs one run per tick whatever is active


def submitter_label(name: str) -> str:
    """The ``submitted_by`` of the runs schedule ``name`` submits."""
    return SUBMITTER_PREFIX + name


def active_runs(history: list[dict[str, Any]], actions: Actions) -> list[tuple[str, str]]:
    """(task id, state) of the recent runs the schedule submitted that are still active."""
    seen: set[str] = set()
    active = []
    for record in reversed([r for r in history if r.get("task_id")][-RECENT:]):
        task_id = record["task_id"]
        if task_id in seen:
            continue
        seen.add(task_id)
        state = actions.state_of(task_id)
        if state in ACTIVE:
            active.append((task_id, str(state)))
    return active


def fire(
    trigger: Trigger,
    history: list[dict[str, Any]],
    actions: Actions,
    now: Callable[[], datetime],
    cancel_wait: float,
) -> dict[str, Any]:
    """Do one trigger; answers its settled history record."""
    s = trigger.settings
    record = new_record(
        trigger.name, s.job, trigger.scheduler_id, now(), trigger.tick, trigger.kind
    )
    active = active_runs(history, actions) if trigger.policy else []
    if active and s.concurrency_policy == "forbid":
        runs = ", ".join(f"{task_id} is {state}" for task_id, state in active)
        reason = f"concurrency_policy forbid: the last run is still active ({runs})"
        return settle(record, "skipped", now(), reason=reason)
    reason = ""
    if active and s.concurrency_policy == "replace":
        reason = _replace([task_id for task_id, _ in active], actions, cancel_wait)
    inputs = s.task_inputs()
    if s.tick_argument is not None:
        inputs[s.tick_argument] = iso_utc(trigger.tick or now())
    try:
        handle = actions.submit(s.task, inputs, submitter_label(trigger.name))
    except (RunyardError, ValueError, OSError) as exc:
        return settle(record, "failed", now(), reason=f"{type(exc).__name__}: {exc}")
    return settle(record, "submitted", now(), reason=reason, handle=handle)


def _replace(task_ids: list[str], actions: Actions, cancel_wait: float) -> str:
    """Cancel the runs and wait for their ends; the reason the record gives."""
    for task_id in task_ids:
        actions.cancel(task_id)
    deadline = time.monotonic() + cancel_wait
    while time.monotonic() < deadline:
        if all(actions.state_of(task_id) not in ACTIVE for task_id in task_ids):
            break
        time.sleep(0.05)
    return "concurrency_policy replace: cancelled " + ", ".join(task_ids)
