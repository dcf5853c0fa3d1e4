"""What a sender offers: its terminal tasks, each keyed by (task_id, run_id, metadata sha256).

>>> [c.task_id for c in collect_candidates(workspace, TaskFilter(task_type="train"))]
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from runyard.workspace.atomic import read_bytes_tolerant
from runyard.workspace.identity import parse_task_id
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskStatus


@dataclass(frozen=True)
class Candidate:
    """One terminal task offered to a receiver."""

    task_id: str
    run_id: str
    metadata_sha256: str  # "" when the task has no metadata.json (failed, cancelled)
    finished_at: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TaskFilter:
    """Which local tasks a push considers; empty fields match everything."""

    task_ids: tuple[str, ...] = ()
    task_type: str | None = None
    task: str | None = None
    since: str | None = None  # ISO-8601 UTC; tasks that finished at or after it

    def matches(self, status: TaskStatus) -> bool:
        if self.task_type and status.task_type != self.task_type:
            return False
        if self.task and status.task_name != self.task:
            return False
        return not (self.since and (status.finished_at or "") < self.since)


def metadata_sha256(workspace: Workspace, task_id: str) -> str:
    data = read_bytes_tolerant(workspace.metadata_path(task_id))
    return hashlib.sha256(data).hexdigest() if data is not None else ""


def candidate_for(workspace: Workspace, status: TaskStatus) -> Candidate:
    return Candidate(
        task_id=status.task_id,
        run_id=status.run_id,
        metadata_sha256=metadata_sha256(workspace, status.task_id),
        finished_at=status.finished_at or "",
    )


def _statuses(workspace: Workspace, task_filter: TaskFilter) -> Iterator[TaskStatus]:
    if task_filter.task_ids:
        ids: Iterator[str] = iter(task_filter.task_ids)
    else:
        ids = (task_id for task_id, _ in workspace.iter_task_dirs())
    for task_id in ids:
        parse_task_id(task_id)
        status = workspace.read_status(task_id)
        if status is not None:
            yield status


def collect_candidates(
    workspace: Workspace, task_filter: TaskFilter
) -> tuple[list[Candidate], list[str]]:
    """``(candidates, unfinished)``: terminal tasks matching the filter, and the matching
    ids that are not finished (never offered: only terminal folders are copied)."""
    candidates: list[Candidate] = []
    unfinished: list[str] = []
    for status in _statuses(workspace, task_filter):
        if not task_filter.matches(status):
            continue
        if status.terminal:
            candidates.append(candidate_for(workspace, status))
        else:
            unfinished.append(status.task_id)
    return candidates, unfinished
