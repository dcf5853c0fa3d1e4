"""What retention removes of the agent-run backend.

- Run workspaces ``agent/workspaces/<run-id>/`` (in, out, tmp) of runs that ended (terminal
  state) more than ``max_age_days`` ago. The run record, its events, its log
  (``<log_dir>/agent/<run-id>.log``), its session, history and state snapshots stay: the
  run still lists and streams, its files answer as an empty listing.
- Uploads: files under ``agent/uploads/`` no artifact record names (every recorded upload
  belongs to a session and stays with it). Only after ``UPLOAD_GRACE_SECONDS``, because an
  upload in progress, or one just moved in place, has no record yet.
Queued and running runs are never touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from runyard.agents.layout import AgentLayout
from runyard.agents.models import Run
from runyard.agents.store.base import AgentStore
from runyard.config import Retention
from runyard.retention.sizes import freed_bytes
from runyard.retention.tasks import parse_time

UPLOAD_GRACE_SECONDS = 3600.0
PAGE = 500


@dataclass(frozen=True)
class PlannedRunWorkspace:
    run_id: str
    path: Path
    bytes: int


@dataclass(frozen=True)
class PlannedUpload:
    name: str
    path: Path
    bytes: int


def plan_run_workspaces(
    layout: AgentLayout, store: AgentStore, policy: Retention, now: datetime
) -> list[PlannedRunWorkspace]:
    if policy.max_age_days is None:
        return []
    cutoff = now - timedelta(days=policy.max_age_days)
    planned = []
    for run in _all_runs(store):
        if not run.state.terminal or parse_time(run.finished_at) >= cutoff:
            continue
        path = layout.run_dir(run.id)
        if os.path.lexists(path):
            planned.append(PlannedRunWorkspace(run.id, path, freed_bytes(path)))
    return sorted(planned, key=lambda p: p.run_id)


def _all_runs(store: AgentStore) -> list[Run]:
    runs: list[Run] = []
    cursor: str | None = None
    while True:
        page = store.list_runs(None, PAGE, cursor)
        runs.extend(page.items)
        cursor = page.next_cursor
        if not cursor or not page.items:
            return runs


def plan_uploads(layout: AgentLayout, store: AgentStore, now: datetime) -> list[PlannedUpload]:
    recorded = store.stored_names()
    oldest = (now - timedelta(seconds=UPLOAD_GRACE_SECONDS)).timestamp()
    planned = []
    try:
        entries = list(os.scandir(layout.uploads))
    except OSError:
        return []
    for entry in entries:
        if entry.name in recorded or not entry.is_file(follow_symlinks=False):
            continue
        with contextlib.suppress(OSError):
            if entry.stat(follow_symlinks=False).st_mtime < oldest:
                path = Path(entry.path)
                planned.append(PlannedUpload(entry.name, path, freed_bytes(path)))
    return sorted(planned, key=lambda p: p.name)


def remove_run_workspace(store: AgentStore, planned: PlannedRunWorkspace) -> bool:
    """Remove it if its run is still terminal; rmtree works on descriptors (no symlinks)."""
    run = store.get_run(planned.run_id)
    if run is None or not run.state.terminal or not os.path.lexists(planned.path):
        return False
    if planned.path.is_symlink() or not planned.path.is_dir():
        return False
    shutil.rmtree(planned.path, ignore_errors=True)
    return not os.path.lexists(planned.path)


def remove_upload(store: AgentStore, planned: PlannedUpload) -> bool:
    """Remove it if no artifact record names it (checked again now)."""
    if planned.name in store.stored_names():
        return False
    try:
        os.unlink(planned.path)
    except OSError:
        return False
    return True


def utc_now() -> datetime:
    return datetime.now(UTC)
