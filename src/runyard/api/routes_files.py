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
from starlette.responses import JSONResponse

from runyard.agents.tokens import RunScope
from runyard.api.downloads import download
from runyard.api.scopes import can_see, request_scope
from runyard.api.services import Services
from runyard.errors import InvalidInput, NoSuchFile, UnsafePath
from runyard.workspace.identity import parse_task_id
from runyard.workspace.safefs import OpenedFile, open_under, walk_files

MAX_LISTED = 10_000


def error_response(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def task_dir_or_error(
    services: Services, task_id: str, scope: RunScope | None = None
) -> Path | JSONResponse:
    try:
        parse_task_id(task_id)
    except InvalidInput as exc:
        return error_response(400, "invalid_task_id", str(exc))
    folder = services.workspace.task_dir(task_id)
    # another session's task answers as one that does not exist
    if not folder.is_dir() or folder.is_symlink() or not can_see(services, task_id, scope):
        return error_response(404, "task_not_found", f"No task folder for {task_id}")
    return folder


def list_files(folder: Path) -> list[dict[str, Any]]:
    """The files a download would serve: no hidden names, symlinks or hard-linked files."""
    entries = walk_files(folder, single_link=True, limit=MAX_LISTED)
    return [{"path": entry.relative, "size": entry.info.st_size} for entry in entries]


def build_files_router(services: Services) -> APIRouter:
    router = APIRouter(tags=["task files"])

    @router.get("/tasks/{task_id}/files")
    async def task_files(request: Request, task_id: str) -> Any:
        folder = task_dir_or_error(services, task_id, request_scope(request))
        if isinstance(folder, JSONResponse):
            return folder
        try:
            items = await run_in_threadpool(list_files, folder)
        except (NoSuchFile, UnsafePath):
            return error_response(404, "task_not_found", f"No task folder for {task_id}")
        return {"items": items, "nextCursor": None}

    @router.get("/tasks/{task_id}/files/{path:path}")
    async def task_file(request: Request, task_id: str, path: str) -> Any:
        opened = await open_task_file(services, request, task_id, path)
        return opened if isinstance(opened, JSONResponse) else download(opened)

    return router


async def open_task_file(
    services: Services, request: Request, task_id: str, path: str
) -> OpenedFile | JSONResponse:
    """A file of a task the request may see, opened race-free (regular, singly linked),
    or the error answer: 400 for a refused path, 404 for a missing task or file."""
    folder = task_dir_or_error(services, task_id, request_scope(request))
    if isinstance(folder, JSONResponse):
        return folder
    try:
        return await run_in_threadpool(open_under, folder, path, single_link=True)
    except UnsafePath as exc:
        return error_response(400, "unsafe_path", str(exc))
    except NoSuchFile as exc:
        return error_response(404, "file_not_found", f"{exc} in {task_id}")
