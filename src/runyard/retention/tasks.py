"""Which finished tasks and run logs retention removes.

- A task is a candidate when it is terminal, its state is one of ``retention.states``, it
  finished (else was created) more than ``max_age_days`` ago and it is not among the newest
  ``keep_last_per_task`` terminal tasks of its registered task name (newest by
  ``finished_at``; every terminal state counts toward the N, whatever ``states`` says).
  With only one of the two rules set, that rule alone decides; with neither, no task goes.
- Lineage: a candidate that is an ancestor (through ``source_tasks``) of any task that
  stays — active ones included — stays too, unless ``include_upstreams``.
- Logs of replaced runs: files ``<log_dir>/<type>/<task_id>/<run_id>.log`` of a terminal
  task whose ``run_id`` is not its current run. They are the kept runs' logs, so they go as
  the history does: older than ``max_age_days``, or (with ``keep_runs``) not the log of one
  of the newest ``keep_runs`` kept runs; every replaced log of a task that goes, whatever
  its age. With neither rule set, none goes.
- Tasks that are queued or running, and folders without a readable status, are left alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from runyard.config import Retention
from runyard.repository import TaskRepository
from runyard.retention.sizes import freed_bytes
from runyard.workspace.history import kept_runs
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskStatus

LOG_SUFFIX = ".log"


@dataclass(frozen=True)
class PlannedTask:
    task_id: str
    run_id: str
    bytes: int


@dataclass(frozen=True)
class PlannedLog:
    """A replaced run's log: ``name`` is relative to the log folder."""

    task_id: str
    run_id: str
    name: str
    path: Path
    bytes: int


@dataclass
class TaskPlan:
    tasks: list[PlannedTask]
    logs: list[PlannedLog]
    kept_upstreams: list[str]


def plan_tasks(
    repository: TaskRepository,
    workspace: Workspace,
    policy: Retention,
    now: datetime,
    include_upstreams: bool,
) -> TaskPlan:
    statuses = _statuses(repository)
    expired = expired_tasks(list(statuses.values()), policy, now)
    kept_upstreams: set[str] = set()
    if not include_upstreams:
        kept_upstreams = upstreams_of_kept(repository, statuses, expired)
        expired -= kept_upstreams
    tasks = [_planned_task(workspace, statuses[task_id]) for task_id in sorted(expired)]
    cutoff = _cutoff(policy, now)
    logs = [
        log
        for status in sorted(statuses.values(), key=lambda s: s.task_id)
        if status.terminal
        for log in _replaced_going(workspace, status, policy, cutoff, status.task_id in expired)
    ]
    return TaskPlan(tasks, logs, sorted(kept_upstreams))


def _replaced_going(
    workspace: Workspace,
    status: TaskStatus,
    policy: Retention,
    cutoff: datetime | None,
    task_goes: bool,
) -> list[PlannedLog]:
    logs = replaced_logs(workspace, status)
    if task_goes or not logs:
        return logs
    kept: set[str] | None = None
    if policy.keep_runs is not None:
        newest = kept_runs(workspace, status.task_id)[: policy.keep_runs]
        kept = {s.run_id for s in newest}
    return [
        log
        for log in logs
        if (cutoff is not None and _mtime(log.path) < cutoff)
        or (kept is not None and log.run_id not in kept)
    ]


def _statuses(repository: TaskRepository) -> dict[str, TaskStatus]:
    found: dict[str, TaskStatus] = {}
    for task_id in repository.list_ids():
        status = repository.get(task_id)
        if status is not None:
            found[task_id] = status
    return found


def expired_tasks(statuses: list[TaskStatus], policy: Retention, now: datetime) -> set[str]:
    """The ids the age and count rules select (before lineage protection)."""
    if not policy.configured:
        return set()
    terminal = [s for s in statuses if s.terminal]
    newest = _newest_per_task(terminal, policy.keep_last_per_task)
    cutoff = _cutoff(policy, now)
    states = set(policy.states)
    return {
        s.task_id
        for s in terminal
        if s.state.value in states
        and s.task_id not in newest
        and (cutoff is None or _ended(s) < cutoff)
    }


def _newest_per_task(terminal: list[TaskStatus], keep: int | None) -> set[str]:
    if keep is None:
        return set()
    by_name: dict[str, list[TaskStatus]] = {}
    for status in terminal:
        by_name.setdefault(status.task_name, []).append(status)
    kept: set[str] = set()
    for group in by_name.values():
        group.sort(key=lambda s: (_ended(s), s.task_id), reverse=True)
        kept.update(s.task_id for s in group[:keep])
    return kept


def upstreams_of_kept(
    repository: TaskRepository, statuses: dict[str, TaskStatus], expired: set[str]
) -> set[str]:
    """Candidates some staying task descends from (ancestors are transitive: one pass)."""
    protected: set[str] = set()
    for task_id in repository.list_ids():
        if task_id in expired or not _has_parents(statuses.get(task_id)):
            continue
        ancestors = repository.context(task_id).relations.ancestors
        protected.update(expired.intersection(ancestors))
    return protected


def _has_parents(status: TaskStatus | None) -> bool:
    # a folder without a readable status may still have parents in its metadata
    return status is None or bool(status.config.get("source_tasks"))


def replaced_logs(workspace: Workspace, status: TaskStatus) -> list[PlannedLog]:
    """Log files in the task's log folder that belong to another run than its current one."""
    folder = workspace.log_dir / status.task_type / status.task_id
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    logs = []
    for entry in sorted(entries, key=lambda e: e.name):
        run_id = entry.name[: -len(LOG_SUFFIX)]
        if not entry.name.endswith(LOG_SUFFIX) or run_id == status.run_id:
            continue
        if entry.is_file(follow_symlinks=False):
            path = Path(entry.path)
            name = os.path.relpath(path, workspace.log_dir)
            logs.append(PlannedLog(status.task_id, run_id, name, path, freed_bytes(path)))
    return logs


def _planned_task(workspace: Workspace, status: TaskStatus) -> PlannedTask:
    size = freed_bytes(workspace.task_dir(status.task_id))
    size += freed_bytes(workspace.run_log_path(status.task_id, status.run_id))  # never log_path
    return PlannedTask(status.task_id, status.run_id, size)


def _cutoff(policy: Retention, now: datetime) -> datetime | None:
    if policy.max_age_days is None:
        return None
    return now - timedelta(days=policy.max_age_days)


def _ended(status: TaskStatus) -> datetime:
    return parse_time(status.finished_at or status.created_at)


def parse_time(text: str | None) -> datetime:
    """A record's UTC timestamp; unreadable ones count as the oldest possible."""
    try:
        parsed = datetime.fromisoformat(text or "")
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _mtime(path: Path) -> datetime:
    try:
        return datetime.fromtimestamp(os.lstat(path).st_mtime, UTC)
    except OSError:
        return datetime.now(UTC)
