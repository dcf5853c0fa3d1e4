"""AxonX 0.2.2's workspace jobs: ``list_entries``, ``list_task_runs``, ``preview_file`` and
``delete_entries``, with its parameters and answer shapes (``axonx.workspace.models``).

Paths are workspace-relative and reach only the task folders
(:mod:`runyard.workspace.browse`): the root shows the task type folders, a type folder its
task folders, nothing of runyard's own state. A run token sees only its session's task
folders and may not delete. ``delete_entries`` (admin only) checks the whole selection
before it deletes anything: a task folder goes through the supervisor's delete (its logs,
kept runs and index entry with it), a file or folder inside one is removed under the task's
claim; an unfinished task's files, its records and the type folders are refused.
"""

from __future__ import annotations

import heapq
from typing import Annotated, Any

from pydantic import Field
from starlette.concurrency import run_in_threadpool

from runyard.api import job_args as a
from runyard.api.file_preview import preview, preview_kind
from runyard.api.jobs import Job, JobResult, Scope
from runyard.api.scopes import can_see
from runyard.api.services import Services
from runyard.changes import ChangeHub
from runyard.errors import ActiveTaskFiles, Forbidden, NoSuchFile, UnsafePath
from runyard.runtime.creation import claim
from runyard.runtime.liveness import settle
from runyard.workspace.browse import (
    Child,
    Visible,
    Where,
    children,
    entry_kind,
    has_file,
    open_folder,
    remove_entry,
    resolve,
)
from runyard.workspace.layout import METADATA_FILE, RECORD_FILES
from runyard.workspace.safefs import open_under

MAX_ENTRIES = 5_000  # one page of a listing, as AxonX's
MAX_DELETE = 200
TASK_TYPE_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_-]*$"


class ListEntriesArgs(a.Strict):
    path: str = Field(
        "",
        description="Workspace-relative directory to list; empty string lists the workspace root.",
    )
    offset: int = Field(0, ge=0, description="Number of sorted directory entries to skip.")


class ListTaskRunsArgs(a.Strict):
    task_type: str = Field(
        min_length=1, pattern=TASK_TYPE_PATTERN,
        description="Workspace-relative task type directory.",
    )  # fmt: skip


class PreviewFileArgs(a.Strict):
    max_bytes: int | None = Field(
        None, ge=1, le=33554432,
        description="Optional byte limit for text, Markdown, JSON and YAML previews; larger "
        "files return a marked prefix.",
    )  # fmt: skip
    path: str = Field(description="Workspace-relative path of the file to preview.")
    offset: int = Field(
        0, ge=0, description="Number of rows to skip for row-based previews such as CSV."
    )
    limit: int = Field(
        200, ge=1, le=5000,
        description="Maximum number of rows to return for CSV, JSONL, or Parquet previews.",
    )  # fmt: skip


class DeleteEntriesArgs(a.Strict):
    paths: list[Annotated[str, Field(min_length=1)]] = Field(
        min_length=1, max_length=MAX_DELETE,
        description="Workspace-relative paths of the files or directories to delete.",
    )  # fmt: skip


def _visible(s: Services, scope: Scope) -> Visible:
    return lambda task_id: can_see(s, task_id, scope)


def _entry(where: Where, child: Child) -> dict[str, Any]:
    kind = preview_kind(child.name) if child.kind == "file" else None
    return {
        "name": child.name, "path": "/".join((*where.parts, child.name)), "kind": child.kind,
        "preview_kind": kind, "supported": kind is not None,
        "size": child.info.st_size if child.kind == "file" else None,
        "modified_at": child.info.st_mtime,
    }  # fmt: skip


def _sort_key(entry: dict[str, Any]) -> tuple[bool, str, str]:
    return entry["kind"] != "directory", entry["name"].casefold(), entry["name"]


def listing(
    s: Services, path: str, offset: int, scope: Scope, *, runs_only: bool = False
) -> dict[str, Any]:
    """One page of the folder ``path`` names (directories first, by name)."""
    visible = _visible(s, scope)
    where = resolve(path, visible)
    with open_folder(s.workspace.root, where.parts) as folder:
        found = (
            _entry(where, child)
            for child in children(folder, where, visible)
            if not runs_only or (child.kind == "directory" and
                                 has_file(folder, child.name, METADATA_FILE))
        )  # fmt: skip
        selected = heapq.nsmallest(offset + MAX_ENTRIES + 1, found, key=_sort_key)
    return {
        "path": where.relative,
        "workspace_root": str(s.workspace.root) if scope is None else None,
        "entries": selected[offset : offset + MAX_ENTRIES],
        "truncated": len(selected) > offset + MAX_ENTRIES,
    }


async def _list_entries(
    s: Services, args: ListEntriesArgs, hub: ChangeHub, scope: Scope
) -> JobResult:
    return await run_in_threadpool(listing, s, args.path, args.offset, scope), True


async def _list_task_runs(
    s: Services, args: ListTaskRunsArgs, hub: ChangeHub, scope: Scope
) -> JobResult:
    answer = await run_in_threadpool(listing, s, args.task_type, 0, scope, runs_only=True)
    return answer, True


def preview_now(s: Services, args: PreviewFileArgs, scope: Scope) -> dict[str, Any]:
    where = resolve(args.path, _visible(s, scope))
    if len(where.parts) < 3:
        raise NoSuchFile(args.path, "a folder, not a file")
    opened = open_under(s.workspace.root, where.relative, single_link=True)
    return preview(opened, args.offset, args.limit, args.max_bytes)


async def _preview_file(
    s: Services, args: PreviewFileArgs, hub: ChangeHub, scope: Scope
) -> JobResult:
    return await run_in_threadpool(preview_now, s, args, scope), True


def _unfinished(s: Services, task_id: str) -> str | None:
    """The state of ``task_id`` when it has not finished (None when it has, or is gone)."""
    status = s.workspace.read_status(task_id)
    if status is None:
        return None
    if status.state == "running":
        status = settle(s.workspace, status)
    return None if status.terminal else status.state


def _checked(s: Services, path: str) -> Where:
    """A path that may be deleted, as it stands now; refused before anything is deleted."""
    where = resolve(path, lambda task_id: True)
    if len(where.parts) < 2:
        raise UnsafePath(path, "the workspace root and its type folders are runyard's")
    if len(where.parts) == 3 and where.parts[2] in RECORD_FILES:
        raise UnsafePath(path, "a task's records go with its folder (delete the folder)")
    entry_kind(s.workspace, where)  # exists, and is no link
    task_id = where.task_id
    assert task_id is not None
    state = _unfinished(s, task_id)
    if state is not None:
        raise ActiveTaskFiles(task_id, state)
    return where


def delete_now(s: Services, paths: list[str]) -> list[dict[str, str]]:
    """Check every path, then delete the top-most ones: the AxonX answer, one a path."""
    selected = [_checked(s, path) for path in dict.fromkeys(paths)]
    names = {where.parts for where in selected}
    roots = [w for w in selected if not any(w.parts[:i] in names for i in range(2, len(w.parts)))]
    return [_delete(s, where) for where in roots]


def _delete(s: Services, where: Where) -> dict[str, str]:
    task_id = where.task_id
    assert task_id is not None
    if len(where.parts) == 2:
        if task_id not in s.supervisor.delete([task_id]):
            raise ActiveTaskFiles(task_id, _unfinished(s, task_id) or "in use")
        return {"deleted": where.relative, "kind": "directory"}
    with claim(s.workspace, task_id):  # no rerun replaces the folder meanwhile
        state = _unfinished(s, task_id)
        if state is not None:
            raise ActiveTaskFiles(task_id, state)
        kind = remove_entry(s.workspace, where)
    return {"deleted": where.relative, "kind": kind}


async def _delete_entries(
    s: Services, args: DeleteEntriesArgs, hub: ChangeHub, scope: Scope
) -> JobResult:
    if scope is not None:
        raise Forbidden("delete_entries needs the server (admin) token")
    s.read_only.refuse("delete workspace entries")
    return await run_in_threadpool(delete_now, s, list(args.paths)), True


LIST_ENTRIES = Job(
    "list_entries",
    "List one directory inside the configured workspace.",
    ListEntriesArgs,
    dict[str, Any],
    _list_entries,
)
LIST_TASK_RUNS = Job(
    "list_task_runs",
    "List task-run directories containing metadata.json.",
    ListTaskRunsArgs,
    dict[str, Any],
    _list_task_runs,
)
PREVIEW_FILE = Job(
    "preview_file",
    "Preview one supported file inside the configured workspace.",
    PreviewFileArgs,
    dict[str, Any],
    _preview_file,
)
DELETE_ENTRIES = Job(
    "delete_entries",
    "Delete multiple files or directories inside the configured workspace.",
    DeleteEntriesArgs,
    list[dict[str, str]],
    _delete_entries,
)
FILES_JOBS = (LIST_ENTRIES, LIST_TASK_RUNS, PREVIEW_FILE, DELETE_ENTRIES)
