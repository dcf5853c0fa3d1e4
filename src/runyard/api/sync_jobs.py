"""AxonX 0.2.2's sync jobs, ``task_sync_index`` and ``sync_tasks``, over runyard's sync
(:mod:`runyard.sync.archive`); both admin only (a run token gets 403), as
``/api/v1/sync/*`` are.

``task_sync_index`` (``task_names``: names of ``[A-Za-z0-9-]{1,32}``, ``live_task_ids``:
task ids) answers ``{transfer_budget_bytes, tasks}``: ``sync.max_task_mb`` in bytes, and
the finished tasks received by sync, each ``{run_id, **DisplayReplica}``. runyard has no
live snapshots: ``live_task_ids`` must be task ids and selects nothing more.

``sync_tasks`` (``path``: the workspace-relative archive, ``deletions``: at most 200 task
folders) deletes, then applies the archive's tasks through the receiver's checks, and
answers AxonX's ``SyncTasksReport`` (``archive``, ``applied``, ``deleted``, ``files``).
The archive is opened where it lies without following a link and copied before it is
read, so the file checked is the file applied; it stays where it was. A refused archive
or task answers ``success: false`` with the reason, as AxonX's does.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field
from starlette.concurrency import run_in_threadpool

from runyard.api import job_args as a
from runyard.api.jobs import Job, JobResult, Scope
from runyard.api.services import Services
from runyard.changes import ChangeHub
from runyard.errors import Forbidden, InvalidInput
from runyard.sync.archive import MAX_DELETIONS, apply_archive, index
from runyard.sync.errors import SyncRefused
from runyard.sync.receiver import ReceiveLimits
from runyard.workspace.identity import parse_task_id
from runyard.workspace.safefs import open_under

TASK_NAME = "^[A-Za-z0-9-]{1,32}$"


class TaskSyncIndexArgs(a.Strict):
    task_names: list[Annotated[str, Field(pattern=TASK_NAME)]] | None = None
    live_task_ids: list[Annotated[str, Field(min_length=1)]] | None = None


class SyncTasksArgs(a.Strict):
    path: str | None = Field(
        None,
        min_length=1,
        description="Workspace-relative path of the staged sync archive; omit to only "
        "apply deletions.",
    )
    deletions: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list,
        max_length=MAX_DELETIONS,
        description="Workspace-relative task directories to delete before applying.",
    )


def _admin(job: str, scope: Scope) -> None:
    if scope is not None:
        raise Forbidden(f"{job} needs the server's admin token, not a run token")


def _budget(s: Services) -> int:
    return s.settings.sync.max_task_mb << 20


async def _task_sync_index(
    s: Services, args: TaskSyncIndexArgs, hub: ChangeHub, scope: Scope
) -> JobResult:
    _admin("task_sync_index", scope)
    for task_id in args.live_task_ids or ():
        parse_task_id(task_id)  # InvalidTaskId: answered success false, as AxonX does
    names = frozenset(args.task_names or ())
    tasks = await run_in_threadpool(index, s.workspace, names, _budget(s))
    return {"transfer_budget_bytes": _budget(s), "tasks": tasks}, True


async def _sync_tasks(s: Services, args: SyncTasksArgs, hub: ChangeHub, scope: Scope) -> JobResult:
    _admin("sync_tasks", scope)
    s.read_only.refuse("receive tasks")
    try:
        report = await run_in_threadpool(_apply, s, args)
    except SyncRefused as exc:
        return f"{exc.code}: {exc}", False
    return report.to_json(), True


def _apply(s: Services, args: SyncTasksArgs) -> Any:
    limits = ReceiveLimits(_budget(s), s.settings.min_free_mb)
    delete = s.supervisor.delete
    refresh = s.repository.refresh
    if args.path is None:
        return apply_archive(s.workspace, None, args.deletions, limits, delete, refresh)
    with tempfile.TemporaryDirectory(prefix=".sync-in-", dir=s.workspace.root) as scratch:
        copy = _copy_archive(s.workspace.root, args.path, Path(scratch), _budget(s))
        return apply_archive(s.workspace, copy, args.deletions, limits, delete, refresh, args.path)


def _copy_archive(root: Path, relative: str, scratch: Path, budget: int) -> Path:
    """The archive at ``relative``, read once without following a link, copied to scratch
    (so the file checked is the file applied); InvalidInput past ``budget`` bytes."""
    target = scratch / "archive.tar.gz"
    with open_under(root, relative, single_link=True) as opened, target.open("wb") as out:
        if opened.info.st_size > budget:
            raise InvalidInput(f"the sync archive is larger than {budget} bytes")
        shutil.copyfileobj(os.fdopen(os.dup(opened.fd), "rb"), out)
    return target


SYNC_JOBS = (
    Job(
        "task_sync_index",
        "Read verified display snapshots for reconciliation.",
        TaskSyncIndexArgs,
        dict[str, Any],
        _task_sync_index,
    ),
    Job(
        "sync_tasks",
        "Replace task directories from one uploaded sync archive.",
        SyncTasksArgs,
        dict[str, Any],
        _sync_tasks,
    ),
)
