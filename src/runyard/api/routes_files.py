"""Read-only access to the files of a task folder (artifacts and records) for the Studio.

``GET /api/v1/tasks/{task_id}/files`` lists them; ``.../files/{path}`` downloads one.
Paths are relative to the task folder. A file is opened once, component by component
without following symlinks, and streamed from that descriptor (``workspace.safefs``):
hidden names, symlinks, hard-linked files and anything that would leave the folder are
refused, even when the task swaps names while it is being served.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from runyard.agents.models import RunScope
from runyard.api.downloads import download
from runyard.api.scopes import can_see, request_scope
from runyard.api.services import Services
from runyard.api.taskfile_run import require_run
from runyard.api.taskrefs import resolve_ref_async
from runyard.api.unwritten import missing_file
from runyard.errors import NoSuchFile, NoTaskFolder, UnsafePath
from runyard.workspace.filenames import name_from_shown, shown_name
from runyard.workspace.identity import parse_task_id
from runyard.workspace.safefs import OpenedFile, open_under, walk_files

MAX_LISTED = 10_000


def task_dir(services: Services, task_id: str, scope: RunScope | None = None) -> Path:
    """The folder of a task the caller may see. InvalidTaskId for a malformed id;
    NoTaskFolder for a missing one and for another session's (answered alike)."""
    parse_task_id(task_id)
    folder = services.workspace.task_dir(task_id)
    if not folder.is_dir() or folder.is_symlink() or not can_see(services, task_id, scope):
        raise NoTaskFolder(task_id)
    return folder


def list_files(folder: Path) -> list[dict[str, Any]]:
    """The files a download would serve: no hidden names, symlinks or hard-linked files.
    Each path is its shown name (:mod:`runyard.workspace.filenames`), which downloads it."""
    entries = walk_files(folder, single_link=True, limit=MAX_LISTED)
    return [{"path": shown_name(entry.relative), "size": entry.info.st_size} for entry in entries]


def build_files_router(services: Services) -> APIRouter:
    router = APIRouter(tags=["task files"])

    @router.get("/tasks/{task_id}/files")
    async def task_files(request: Request, task_id: str) -> Any:
        task_id = await resolve_ref_async(services, task_id, request_scope(request))
        folder = task_dir(services, task_id, request_scope(request))
        try:
            items = await run_in_threadpool(list_files, folder)
        except (NoSuchFile, UnsafePath) as exc:  # the folder went away while listed
            raise NoTaskFolder(task_id) from exc
        return {"items": items, "nextCursor": None}

    @router.get("/tasks/{task_id}/files/{path:path}")
    async def task_file(
        request: Request, task_id: str, path: str, run_id: str | None = None
    ) -> Any:
        scope = request_scope(request)
        task_id = await resolve_ref_async(services, task_id, scope)
        opened = await open_task_file(services, request, task_id, path)
        if run_id is not None:  # only that run's file (api/taskfile_run.py)
            await run_in_threadpool(require_run, services, task_id, run_id, opened, scope)
        return download(opened)

    return router


async def open_task_file(
    services: Services, request: Request, task_id: str, path: str
) -> OpenedFile:
    """A file of a task the request may see, opened race-free (regular, singly linked).
    Raises what :func:`task_dir` raises, UnsafePath for a refused path (400) and
    NoSuchFile for a missing file (404). ``path`` is a shown name (as listed); ``task_id``
    may be any task reference (:mod:`runyard.api.taskrefs`)."""
    task_id = await resolve_ref_async(services, task_id, request_scope(request))
    folder = task_dir(services, task_id, request_scope(request))
    name = name_from_shown(path)
    try:
        return await run_in_threadpool(open_under, folder, name, single_link=True)
    except NoSuchFile as exc:  # says whether the task may still write it
        scope = request_scope(request)
        missing = await run_in_threadpool(missing_file, services, task_id, path, exc, scope)
        if missing is exc:
            raise NoSuchFile(path, f"{exc.reason} in {task_id}") from exc
        raise missing from exc
