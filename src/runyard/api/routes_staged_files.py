"""AxonX 0.2.2's file endpoint, ``/files``: how an AxonX peer puts a file into this
workspace before a job reads it (its sync sender's archive for ``sync_tasks``, its
``axonx plugin install --target`` wheel for ``install_plugin``). Admin only: a run token
gets 403, as on ``/api/v1/sync``.

``POST /files`` takes the raw bytes of one file (``Content-Type:
application/octet-stream``, as AxonX's ``HttpClient.copy_file`` sends them), its name in
``x-file-name`` and, optionally, a directory in ``x-file-directory`` (``tmp`` or below it),
and answers AxonX's envelope with a ``FileCopy``: ``{"answer": {"path":
"tmp/<32 hex>/<name>", "size": n}, "success": true, "metadata": {}}``. Each upload has a
folder of its own, so nothing is overwritten (:mod:`runyard.workspace.staging_area`).
A ``Content-Length`` past ``files_max_upload_mb`` is refused before a byte is read, and
the bytes are counted as they arrive too (413); a full disk answers 507; a refused name or
directory 422 (``{"detail": ...}``, as AxonX's ``HTTPException``); in each case nothing
is kept. A cut connection leaves nothing either.

``DELETE /files?path=tmp/<hex>/<name>`` removes that staged file and its emptied folders
(a file already gone is fine: AxonX discards after a job that may have consumed it) and
answers ``{"answer": {"path": ...}}``; a path outside ``tmp/`` is refused (422).

A ``multipart/form-data`` body (a ``file`` part, a ``directory`` field before it) is
taken too, as AxonX's server takes it (:mod:`runyard.api.staged_multipart`); any other
type is refused by the request guard (415).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from starlette.concurrency import run_in_threadpool

from runyard.api.envelope import job_response
from runyard.api.scopes import request_scope
from runyard.api.services import Services
from runyard.api.staged_multipart import OVERHEAD_BYTES, stage_multipart
from runyard.errors import Forbidden
from runyard.workspace.space import require_space
from runyard.workspace.staging_area import StagedUpload, discard, too_large

FILE_NAME_HEADER = "x-file-name"
FILE_DIRECTORY_HEADER = "x-file-directory"
BLOCK_BYTES = 1 << 20  # what is gathered before a write is handed to a thread


def _admin_only(request: Request, doing: str) -> None:
    if request_scope(request) is not None:
        raise Forbidden(f"{doing} needs the server's admin token, not a run token")


def _declared_size(request: Request) -> int | None:
    value = request.headers.get("content-length", "")
    return int(value) if value.isdigit() else None


async def _blocks(request: Request) -> AsyncIterator[bytes]:
    """The body in blocks of about BLOCK_BYTES."""
    pending = bytearray()
    async for chunk in request.stream():
        pending += chunk
        if len(pending) >= BLOCK_BYTES:
            yield bytes(pending)
            pending.clear()
    if pending:
        yield bytes(pending)


async def stage_request(services: Services, request: Request) -> dict[str, Any]:
    """Write the request's body into the staging area; AxonX's ``FileCopy``."""
    limit = services.settings.files_max_upload_mb << 20
    content_type = request.headers.get("content-type", "")
    multipart = content_type.split(";")[0].strip().lower() == "multipart/form-data"
    declared = _declared_size(request)
    if declared is not None and declared > limit + (OVERHEAD_BYTES if multipart else 0):
        raise too_large(limit)
    services.read_only.refuse("stage a file")
    root = services.workspace.root
    await run_in_threadpool(require_space, root, services.settings.min_free_mb)
    name = request.headers.get(FILE_NAME_HEADER, "")
    directory = request.headers.get(FILE_DIRECTORY_HEADER, "").strip() or None
    if multipart:
        staged = await stage_multipart(
            request.stream(), content_type, root, (name, directory), limit
        )
        return {"path": staged.path, "size": staged.size}
    upload = await run_in_threadpool(StagedUpload.begin, root, name, directory, limit)
    try:
        async for block in _blocks(request):
            await run_in_threadpool(upload.write, block)
        staged = await run_in_threadpool(upload.commit)
    finally:
        await run_in_threadpool(upload.close)
    return {"path": staged.path, "size": staged.size}


def build_staged_files_router(services: Services) -> APIRouter:
    router = APIRouter(tags=["axonx files"])

    @router.post("/files")
    async def copy_file(request: Request) -> Any:
        _admin_only(request, "POST /files")
        return job_response(await stage_request(services, request), True)

    @router.delete("/files")
    async def discard_file(request: Request, path: str) -> Any:
        _admin_only(request, "DELETE /files")
        gone = await run_in_threadpool(discard, services.workspace.root, path)
        return job_response({"path": gone}, True)

    return router


def mount_staged_files(app: FastAPI, services: Services) -> None:
    app.include_router(build_staged_files_router(services))
