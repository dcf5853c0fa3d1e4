"""One garbage collection: plan what retention selects, then remove it (or only report it).

Removal goes through the owner of each thing: tasks through ``delete`` (the supervisor's
delete on a server, so its records such as ``.submitters/`` and the task's log go too, and
active tasks are refused there again), run workspaces and uploads after their record is
checked once more. Each item is re-checked just before removal, so a task replaced by a new
run since the plan, a run that became active, or an upload that got its record stays. The
report lists what was removed (or, for a dry run, what would be) and the bytes that frees.

    report = collect(context, dry_run=False, include_upstreams=False)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runyard.agents.layout import AgentLayout
from runyard.agents.store.base import AgentStore
from runyard.config import Retention
from runyard.repository import TaskRepository
from runyard.retention.agentspace import (
    PlannedRunWorkspace,
    PlannedUpload,
    plan_run_workspaces,
    plan_uploads,
    remove_run_workspace,
    remove_upload,
    utc_now,
)
from runyard.retention.blobs import PlannedBlob, plan_blobs, sweep_blobs
from runyard.retention.history import PlannedHistory, plan_history, remove_planned_history
from runyard.retention.tasks import PlannedLog, PlannedTask, plan_tasks
from runyard.workspace.dedup import dedup_all
from runyard.workspace.history import run_ids
from runyard.workspace.layout import Workspace

log = logging.getLogger("runyard.retention")


@dataclass
class GcContext:
    """What a collection acts on; ``delete`` deletes tasks and answers the ids deleted."""

    workspace: Workspace
    repository: TaskRepository
    delete: Callable[[list[str]], list[str]]
    policy: Retention
    agent_layout: AgentLayout | None = None
    agent_store: AgentStore | None = None
    # one collection at a time per context (the periodic one and a requested one)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class GcReport:
    dry_run: bool
    tasks: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    run_workspaces: list[str] = field(default_factory=list)
    uploads: list[str] = field(default_factory=list)
    kept_upstreams: list[str] = field(default_factory=list)
    bytes: int = 0
    history: list[str] = field(default_factory=list)  # "<task_id>/<run_id>" kept runs
    blobs: list[str] = field(default_factory=list)  # sha256 of stored files no run names

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "tasks": self.tasks,
            "logs": self.logs,
            "run_workspaces": self.run_workspaces,
            "uploads": self.uploads,
            "kept_upstreams": self.kept_upstreams,
            "bytes": self.bytes,
            "history": self.history,
            "blobs": self.blobs,
        }


@dataclass
class _Plan:
    tasks: list[PlannedTask]
    logs: list[PlannedLog]
    runs: list[PlannedRunWorkspace]
    uploads: list[PlannedUpload]
    kept_upstreams: list[str]
    history: list[PlannedHistory] = field(default_factory=list)
    blobs: list[PlannedBlob] = field(default_factory=list)


def collect(
    context: GcContext,
    *,
    dry_run: bool = False,
    include_upstreams: bool = False,
    now: datetime | None = None,
) -> GcReport:
    """Plan and (unless ``dry_run``) remove; the report of what went or would go."""
    with context.lock:
        plan = _plan(context, now or utc_now(), include_upstreams)
        report = GcReport(dry_run, kept_upstreams=plan.kept_upstreams)
        if dry_run:
            _report_all(report, plan)
        else:
            _remove_logs(context, plan.logs, report)
            _remove_tasks(context, plan.tasks, report)
            _remove_history(context, plan.history, report)
            _remove_blobs(context, report)
            _remove_agent_files(context, plan, report)
    if not dry_run and (report.tasks or report.logs or report.run_workspaces or report.uploads):
        log.info(
            "gc removed %d tasks, %d logs, %d run workspaces, %d uploads (%d bytes)",
            len(report.tasks), len(report.logs), len(report.run_workspaces),
            len(report.uploads), report.bytes,
        )  # fmt: skip
    return report


def _plan(context: GcContext, now: datetime, include_upstreams: bool) -> _Plan:
    tasks = plan_tasks(
        context.repository, context.workspace, context.policy, now, include_upstreams
    )
    runs: list[PlannedRunWorkspace] = []
    uploads: list[PlannedUpload] = []
    if context.agent_layout is not None and context.agent_store is not None:
        runs = plan_run_workspaces(context.agent_layout, context.agent_store, context.policy, now)
        uploads = plan_uploads(context.agent_layout, context.agent_store, now)
    history = plan_history(context.workspace, context.policy, now)
    going = {(h.task_id, h.run_id) for h in history}
    going |= {
        (t.task_id, run) for t in tasks.tasks for run in run_ids(context.workspace, t.task_id)
    }
    blobs = plan_blobs(context.workspace, going)
    return _Plan(tasks.tasks, tasks.logs, runs, uploads, tasks.kept_upstreams, history, blobs)


def _report_all(report: GcReport, plan: _Plan) -> None:
    report.tasks = [t.task_id for t in plan.tasks]
    report.logs = [entry.name for entry in plan.logs]
    report.run_workspaces = [r.run_id for r in plan.runs]
    report.uploads = [u.name for u in plan.uploads]
    report.history = [h.name for h in plan.history]
    report.blobs = [b.sha256 for b in plan.blobs]
    report.bytes = sum(item.bytes for group in _groups(plan) for item in group)


def _groups(plan: _Plan) -> list[list[Any]]:
    return [plan.tasks, plan.logs, plan.runs, plan.uploads, plan.history, plan.blobs]


def _remove_logs(context: GcContext, logs: list[PlannedLog], report: GcReport) -> None:
    for entry in logs:
        status = context.workspace.read_status(entry.task_id)
        if status is not None and status.run_id == entry.run_id:
            continue  # that run is current again (cannot happen by design; be safe)
        try:
            entry.path.unlink()
        except OSError:
            continue
        report.logs.append(entry.name)
        report.bytes += entry.bytes


def _remove_tasks(context: GcContext, tasks: list[PlannedTask], report: GcReport) -> None:
    unchanged = {}
    for task in tasks:
        status = context.workspace.read_status(task.task_id)
        if status is not None and status.terminal and status.run_id == task.run_id:
            unchanged[task.task_id] = task
    deleted = set(context.delete(list(unchanged))) if unchanged else set()
    for task_id, task in unchanged.items():
        if task_id in deleted:
            report.tasks.append(task_id)
            report.bytes += task.bytes


def _remove_history(context: GcContext, planned: list[PlannedHistory], report: GcReport) -> None:
    removed = set(remove_planned_history(context.workspace, planned))
    for entry in planned:
        if entry.name in removed:
            report.history.append(entry.name)
            report.bytes += entry.bytes


def _remove_blobs(context: GcContext, report: GcReport) -> None:
    """Store the files of kept runs a crash left plain, then sweep what no run names."""
    dedup_all(context.workspace)
    for blob in sweep_blobs(context.workspace):
        report.blobs.append(blob.sha256)
        report.bytes += blob.bytes


def _remove_agent_files(context: GcContext, plan: _Plan, report: GcReport) -> None:
    store = context.agent_store
    if store is None:
        return
    for run in plan.runs:
        if remove_run_workspace(store, run):
            report.run_workspaces.append(run.run_id)
            report.bytes += run.bytes
    for upload in plan.uploads:
        if remove_upload(store, upload):
            report.uploads.append(upload.name)
            report.bytes += upload.bytes
