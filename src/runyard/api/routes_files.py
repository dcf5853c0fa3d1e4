"""Read-only access to the files of a task folder (artifacts and records) for the Studio.

``GET /api/v1/tasks/{task_id}/files`` lists them; ``.../files/{path}`` downloads one.
Paths are relative to the task folder; anything that would leave it is refused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from runyard.agents.tokens import RunScope
from runyard.api.downloads import download
from runyard.api.scopes import can_see, request_scope
from runyard.api.services import Services
from runyard.errors import InvalidInput, UnsafePath
from runyard.workspace.artifacts import resolve_inside
from runyard.workspace.identity import parse_task_id

MAX_LISTED = 10_000


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def _task_dir(
    services: Services, task_id: str, scope: RunScope | None = None
) -> Path | JSONResponse:
    try:
        parse_task_id(task_id)
    except InvalidInput as exc:
        return _error(400, "invalid_task_id", str(exc))
    folder = services.workspace.task_dir(task_id)
    # another session's task answers as one that does not exist
    if not folder.is_dir() or folder.is_symlink() or not can_see(services, task_id, scope):
        return _error(404, "task_not_found", f"No task folder for {task_id}")
    return folder


def list_files(folder: Path) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            rel = path.relative_to(folder).as_posix()
            items.append({"path": rel, "size": path.stat().st_size})
            if len(items) >= MAX_LISTED:
                return items
    return items


def build_files_router(services: Services) -> APIRouter:
    router = APIRouter(tags=["task files"])

    @router.get("/tasks/{task_id}/files")
    async def task_files(request: Request, task_id: str) -> Any:
        folder = _task_dir(services, task_id, request_scope(request))
        if isinstance(folder, JSONResponse):
            return folder
        return {"items": list_files(folder), "nextCursor": None}

    @router.get("/tasks/{task_id}/files/{path:path}")
    async def task_file(request: Request, task_id: str, path: str) -> Any:
        folder = _task_dir(services, task_id, request_scope(request))
        if isinstance(folder, JSONResponse):
            return folder
        if any(part.startswith(".") for part in path.split("/")):
            return _error(400, "unsafe_path", f"Hidden files are not served: {path!r}")
        try:
            target = resolve_inside(folder, path)
        except UnsafePath as exc:
            return _error(400, "unsafe_path", str(exc))
        if not target.is_file():
            return _error(404, "file_not_found", f"No file {path!r} in {task_id}")
        return download(target)

    return router
