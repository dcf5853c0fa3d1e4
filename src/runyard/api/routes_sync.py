"""The receiving end of task sync (DESIGN section 10): admin token only.

``POST /api/v1/sync/diff`` ``{"candidates": [{task_id, run_id, metadata_sha256,
finished_at}]}`` answers ``{send: [ids], skip: [ids], refuse: {id: reason}}``.
``POST /api/v1/sync/tasks/{task_id}?source=<name>`` takes the task as an
``application/x-tar`` stream (the one non-JSON body the request guard lets through here;
see :mod:`runyard.api.guard`) and answers ``{task_id, action, replaced_run, bytes}``;
``POST /api/v1/sync/held`` ``{source}`` lists the tasks that source sent here, and
``POST /api/v1/sync/delete`` ``{source, task_ids}`` deletes those of them that are
finished here (``runyard sync push --delete``; see :mod:`runyard.sync.deletion`);
409 when the rules refuse it (active here, newer here), 413 when it is larger than
``sync.max_task_mb``, 422 when its members or hashes are wrong, 507 when it would leave
less than ``min_free_mb`` free; a refused task leaves nothing behind. A run token gets
403 on both: a run may not write other sessions' tasks. With ``sync.target`` configured,
:func:`mount_sync` also runs the continuous-sync outbox (:mod:`runyard.sync.outbox`) from
the server's start to its shutdown.

The body is read from ``request.stream()`` by a worker thread through a small blocking
reader, so the tar is parsed as it arrives and memory stays flat at any size.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import APIRouter, FastAPI, Request
from starlette.concurrency import run_in_threadpool

from runyard.api.lifespan import run_beside
from runyard.api.requestbody import read_json_body
from runyard.api.scopes import request_scope
from runyard.api.services import Services
from runyard.errors import ConfigError, Forbidden, InvalidInput
from runyard.sync.deletion import MAX_DELETES, delete_synced, held_from
from runyard.sync.diff import diff, parse_candidates
from runyard.sync.outbox import SyncOutbox
from runyard.sync.receiver import ReceiveLimits, apply_task_stream
from runyard.sync.sender import Receiver
from runyard.workspace.identity import parse_task_id

MAX_SOURCE_CHARS = 200


def _admin_only(request: Request) -> None:
    if request_scope(request) is not None:
        raise Forbidden("Sync needs the server's admin token, not a run token")


class BlockingBody:
    """A file-like ``read(n)`` over the request's async body, for a worker thread."""

    def __init__(self, stream: AsyncIterator[bytes]) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._done = False

    async def _next(self) -> bytes | None:
        try:
            return await self._stream.__anext__()
        except StopAsyncIteration:
            return None

    def read(self, size: int = -1) -> bytes:
        while not self._done and (size < 0 or len(self._buffer) < size):
            chunk = anyio.from_thread.run(self._next)
            if chunk is None:
                self._done = True
            else:
                self._buffer += chunk
        if size < 0:
            size = len(self._buffer)
        out = bytes(self._buffer[:size])
        del self._buffer[:size]
        return out


def build_sync_router(services: Services) -> APIRouter:
    router = APIRouter(tags=["sync"])

    @router.post("/sync/diff")
    async def sync_diff(request: Request) -> Any:
        _admin_only(request)
        data = await read_json_body(request, services.settings.max_body_bytes)
        candidates = parse_candidates(data)  # InvalidInput: 422 invalid_candidates
        return await run_in_threadpool(diff, services.workspace, candidates)

    @router.post("/sync/tasks/{task_id}")
    async def sync_task(request: Request, task_id: str, source: str = "") -> Any:
        _admin_only(request)
        parse_task_id(task_id)
        services.read_only.refuse("receive a task")  # 507 on a full disk (api/readonly.py)
        origin = {"server": source[:MAX_SOURCE_CHARS] or "unknown"}
        body = BlockingBody(request.stream().__aiter__())
        settings = services.settings
        limits = ReceiveLimits(settings.sync.max_task_mb << 20, settings.min_free_mb)
        # a SyncRefused answers 409, 413 or 422 with its own code (api/errormap.py), a
        # task that would leave less than min_free_mb free 507
        outcome = await run_in_threadpool(
            apply_task_stream,
            services.workspace,
            task_id,
            body,  # type: ignore[arg-type]
            origin,
            limits,
        )
        services.repository.refresh(task_id)
        return {
            "task_id": outcome.task_id,
            "action": outcome.action,
            "replaced_run": outcome.replaced_run,
            "bytes": outcome.bytes,
        }

    _deletion_routes(router, services)
    return router


def _deletion_routes(router: APIRouter, services: Services) -> None:
    @router.post("/sync/held")
    async def sync_held(request: Request) -> Any:
        _admin_only(request)
        source = _source_of(await read_json_body(request, services.settings.max_body_bytes))
        if source is None:
            raise InvalidInput("'source' must be a non-empty string")
        return {"task_ids": await run_in_threadpool(held_from, services.workspace, source)}

    @router.post("/sync/delete")
    async def sync_delete(request: Request) -> Any:
        _admin_only(request)
        data = await read_json_body(request, services.settings.max_body_bytes)
        source = _source_of(data)
        task_ids = data.get("task_ids") if isinstance(data, dict) else None
        if source is None or not isinstance(task_ids, list) or not _id_list(task_ids):
            raise InvalidInput(f"expected {{source, task_ids}} with at most {MAX_DELETES} task ids")
        answer = await run_in_threadpool(
            delete_synced, services.workspace, source, task_ids, services.supervisor.delete
        )
        for task_id in answer["deleted"]:
            services.repository.refresh(task_id)
        return answer


def _source_of(data: Any) -> str | None:
    source = data.get("source") if isinstance(data, dict) else None
    if isinstance(source, str) and 0 < len(source) <= MAX_SOURCE_CHARS:
        return source
    return None


def _id_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) <= MAX_DELETES
        and all(isinstance(item, str) and len(item) < 300 for item in value)
    )


def build_outbox(services: Services) -> SyncOutbox | None:
    """The continuous-sync outbox of ``sync.target``, or None when no target is set."""
    sync = services.settings.sync
    if sync.target is None:
        return None
    target = services.settings.targets.get(sync.target)
    if target is None:
        raise ConfigError(f"sync.target {sync.target!r} is not one of the configured targets")
    receiver = Receiver(target.url, target.token)
    return SyncOutbox(services.workspace, receiver, sync.task_types)


def mount_sync(app: FastAPI, services: Services) -> None:
    """Add the receiving routes; with ``sync:`` set, push each task as it finishes."""
    app.include_router(build_sync_router(services), prefix="/api/v1")
    outbox = build_outbox(services)
    if outbox is None:
        return
    services.supervisor.on_finished = outbox.enqueue
    run_beside(app, outbox.start, outbox.stop)
