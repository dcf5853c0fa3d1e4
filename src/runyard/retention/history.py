"""Which kept earlier runs (``<workspace>/.history``) retention removes.

- ``keep_runs``: per task, only the newest N kept runs stay (the current run is not
  counted: it lives in the task folder, not in history).
- ``max_age_days``: a kept run that finished (else was created) before the cutoff goes.
- Either rule alone when the other is unset; with neither, kept runs stay: gc without
  retention deletes no run history. The history of a task whose folder no longer exists
  (a crash between a run's keep and the new run's folder; deleting a task removes its
  history at once) follows the same rules.
- The blobs no kept run names any more go after the entries (:mod:`runyard.retention.blobs`).

Each entry is named ``<task_id>/<run_id>`` in the report.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime

from runyard.config import Retention
from runyard.retention.sizes import freed_bytes
from runyard.retention.tasks import parse_time
from runyard.runtime.creation import claim
from runyard.workspace.history import (
    history_task_ids,
    kept_runs,
    remove_history,
    remove_kept_runs,
    task_history_dir,
)
from runyard.workspace.history import run_ids as run_ids_kept
from runyard.workspace.layout import Workspace


@dataclass(frozen=True)
class PlannedHistory:
    task_id: str
    run_id: str
    bytes: int

    @property
    def name(self) -> str:
        return f"{self.task_id}/{self.run_id}"


def plan_history(workspace: Workspace, policy: Retention, now: datetime) -> list[PlannedHistory]:
    planned = []
    for task_id in history_task_ids(workspace):
        folder = task_history_dir(workspace, task_id)
        for run_id in _doomed(workspace, task_id, policy, now):
            planned.append(PlannedHistory(task_id, run_id, freed_bytes(folder / run_id)))
    return planned


def _doomed(workspace: Workspace, task_id: str, policy: Retention, now: datetime) -> list[str]:
    statuses = kept_runs(workspace, task_id)
    cutoff = None
    if policy.max_age_days is not None:
        cutoff = now.timestamp() - policy.max_age_days * 86400
    keep = policy.keep_runs
    return [
        s.run_id
        for index, s in enumerate(statuses)
        if (keep is not None and index >= keep)
        or (cutoff is not None and parse_time(s.finished_at or s.created_at).timestamp() < cutoff)
    ]


def remove_planned_history(workspace: Workspace, planned: list[PlannedHistory]) -> list[str]:
    """Remove the planned entries, each task under its claim; the names removed."""
    removed: list[str] = []
    by_task: dict[str, set[str]] = {}
    for entry in planned:
        by_task.setdefault(entry.task_id, set()).add(entry.run_id)
    for task_id, run_ids in by_task.items():
        with claim(workspace, task_id):
            gone = remove_kept_runs(workspace, task_id, run_ids)
            removed += [f"{task_id}/{run_id}" for run_id in gone]
            if not os.path.lexists(workspace.task_dir(task_id)) and not run_ids_kept(
                workspace, task_id
            ):  # a vanished task's last kept run went: its folder goes too
                remove_history(workspace, task_id)
    return removed
