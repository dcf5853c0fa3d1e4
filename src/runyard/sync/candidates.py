"""What a sender offers: its terminal tasks, each keyed by (task_id, run_id, metadata sha256).

>>> [c.task_id for c in collect_candidates(workspace, TaskFilter(task_type="train"))]
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

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

    def matches_id(self, task_id: str) -> bool:
        """What can be told from the id alone: its type and registered task."""
        tid = parse_task_id(task_id)
        if self.task_type and tid.task_type != self.task_type:
            return False
        return not (self.task and tid.task != self.task)


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


class Offer(NamedTuple):
    """What a push considers: terminal ``candidates``; the ids that are ``unfinished``
    (never offered: only terminal folders are copied); and the ids whose ``status.json``
    is there but not a valid status of the task (``invalid``: never offered, since a
    task can rewrite its own record, and the push says so)."""

    candidates: list[Candidate]
    unfinished: list[str]
    invalid: list[str]


def _statuses(
    workspace: Workspace, task_filter: TaskFilter, invalid: list[str]
) -> Iterator[TaskStatus]:
    if task_filter.task_ids:
        ids: Iterator[str] = iter(task_filter.task_ids)
    else:
        ids = (task_id for task_id, _ in workspace.iter_task_dirs())
    for task_id in ids:
        parse_task_id(task_id)
        status = workspace.read_status(task_id)
        if status is not None:
            yield status
        elif task_filter.matches_id(task_id) and os.path.lexists(workspace.status_path(task_id)):
            invalid.append(task_id)


def collect_candidates(workspace: Workspace, task_filter: TaskFilter) -> Offer:
    """The tasks matching the filter, sorted into an :class:`Offer`."""
    offer = Offer([], [], [])
    for status in _statuses(workspace, task_filter, offer.invalid):
        if not task_filter.matches(status):
            continue
        if status.terminal:
            offer.candidates.append(candidate_for(workspace, status))
        else:
            offer.unfinished.append(status.task_id)
    return offer
