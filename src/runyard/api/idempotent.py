"""Running a creating request at most once per ``Idempotency-Key`` (see ``idempotency``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from runyard.agents.models import RunScope
from runyard.api.idempotency import (
    HEADER,
    IdempotencyStore,
    body_hash,
    check_key,
    current_key,
    split_marker,
)
from runyard.api.services import Services
from runyard.errors import IdempotencyConflict, InsufficientStorage
from runyard.faults import fault_point
from runyard.runtime.creation import IDEMPOTENCY_FILE
from runyard.workspace.atomic import read_bytes_tolerant

log = logging.getLogger(__name__)

REPLAYED_HEADER = "idempotent-replayed"
_STORE_LOCK = threading.Lock()
Work = Callable[[], Awaitable[Any]]
Recover = Callable[[str], Any]


def idempotency_store(services: Services) -> IdempotencyStore:
    """The workspace's key store, opened once per server (it makes a folder and opens
    SQLite: call it from the thread pool); ``Services.stop`` closes it."""
    with _STORE_LOCK:
        if services.idempotency is None:
            services.idempotency = IdempotencyStore(services.workspace.root)
        return services.idempotency


def caller_route(route: str, scope: RunScope | None) -> str:
    """Keys are per route and per caller: a run's key never answers the admin's request."""
    return f"{route}:{'admin' if scope is None else 'run/' + scope.run_id}"


async def run_once(
    request: Request,
    services: Services,
    route: str,
    body: Any,
    work: Work,
    *,
    conflict: Callable[[IdempotencyConflict], Response],
    success_status: int = 200,
    recover: Recover | None = None,
) -> Any:
    """``work()`` once per key: its JSON answer, replayed for a retry with the same key.

    ``work`` returns a JSON-able answer (kept for the key) or a Response (an answer that
    created nothing, such as a 507: the key is released). ``recover(key)`` finds what a
    request cut short by a crash made, or None.
    """
    key = request.headers.get(HEADER)
    if key is None:
        return await work()
    check_key(key)
    store = services.idempotency  # opened by the first keyed request (in a thread: it is I/O)
    if store is None:
        store = await run_in_threadpool(idempotency_store, services)
    async with store.held(route, key):
        try:
            stored = await run_in_threadpool(store.reserve, route, key, body_hash(body))
        except IdempotencyConflict as exc:
            return conflict(exc)
        if stored is not None and stored.status is not None:
            return _replay(stored.body, stored.status)
        if stored is not None and recover is not None:
            found = await run_in_threadpool(recover, marker(route, key))
            if found is not None:
                await finish_key(store.answer, route, key, success_status, found)
                return _replay(found, success_status)
        return await _first(store, route, key, work, success_status)


async def _first(
    store: IdempotencyStore, route: str, key: str, work: Work, success_status: int
) -> Any:
    token = current_key.set(marker(route, key))
    try:
        result = await work()
    except Exception:
        await finish_key(store.release, route, key)
        raise
    finally:
        current_key.reset(token)
    if isinstance(result, Response):
        await finish_key(store.release, route, key)
        return result
    fault_point("idempotency.answer")  # made, not yet answered: the worst moment to die
    await finish_key(store.answer, route, key, success_status, result)
    return JSONResponse(result, status_code=success_status)


async def finish_key(call: Callable[..., None], route: str, key: str, *args: Any) -> None:
    """Answer or release a key; a full disk does not turn the request's own outcome into
    an error. The key stays reserved, and its retry finds what this request made (or, if it
    made nothing, runs again)."""
    try:
        await run_in_threadpool(call, route, key, *args)
    except InsufficientStorage as exc:
        log.warning("Idempotency-Key %r of %s left reserved: %s", key, route, exc)


def marker(route: str, key: str) -> str:
    """What a created task keeps of the request's key (the caller's route included)."""
    return f"{route}\n{key}"


def _replay(body: Any, status: int) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers={REPLAYED_HEADER: "true"})


def reserved_id(services: Services, make_id: Callable[[], str]) -> str:
    """The id for what the current request creates: chosen once per Idempotency-Key (and
    kept with it before anything exists), a fresh one without a key."""
    marked = current_key.get()
    if marked is None:
        return make_id()
    route, key = split_marker(marked)
    return idempotency_store(services).reserve_id(route, key, make_id)


def find_reserved(services: Services, marked: str, lookup: Callable[[str], Any]) -> Any:
    """What a request cut short by a crash made under its reserved id, or None."""
    route, key = split_marker(marked)
    pending = idempotency_store(services).pending_id(route, key)
    return None if pending is None else lookup(pending)


def find_keyed_task(services: Services, key: str) -> dict[str, Any] | None:
    """The submit answer of the task created with ``key`` (a :func:`marker`), if any."""
    wanted = key.encode()
    for task_id, folder in services.workspace.iter_task_dirs():
        if read_bytes_tolerant(folder / IDEMPOTENCY_FILE) != wanted:
            continue
        status = services.workspace.read_status(task_id)
        if status is not None:
            return {"task_id": task_id, "run_id": status.run_id, "task": status.task_name}
    return None
