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
    Stored,
    body_hash,
    check_key,
    current_key,
    split_marker,
)
from runyard.api.services import Services
from runyard.errors import IdempotencyConflict, InsufficientStorage
from runyard.faults import fault_point
from runyard.runtime.creation import made_for_key

log = logging.getLogger(__name__)

REPLAYED_HEADER = "idempotent-replayed"
_STORE_LOCK = threading.Lock()
Work = Callable[[], Awaitable[Any]]
Make = Callable[[], Any]  # in the thread pool: a JSON-able answer or a Response
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
    store = await _store(services, key)
    async with store.held(route, key):
        try:
            stored = await run_in_threadpool(store.reserve, route, key, body_hash(body))
        except IdempotencyConflict as exc:
            return conflict(exc)
        if stored is not None:
            replay = await run_in_threadpool(
                _replay_of, store, route, key, stored, recover, success_status
            )
            if replay is not None:
                return _replay(*replay)
        return await _first(store, route, key, work, success_status)


async def run_once_in_thread(
    request: Request,
    services: Services,
    route: str,
    body: Any,
    make: Make,
    *,
    conflict: Callable[[IdempotencyConflict], Response],
    success_status: int = 200,
    recover: Recover | None = None,
) -> Any:
    """:func:`run_once` of a ``make`` that runs in the thread pool (it writes and syncs):
    the key's reservation, ``make`` and the key's answer are one hop there, not three (a
    hop to the pool and back costs the server 60–90 µs of CPU)."""
    key = request.headers.get(HEADER)
    if key is None:
        return await run_in_threadpool(make)
    store = await _store(services, key)
    digest = body_hash(body)
    async with store.held(route, key):
        try:
            replay, result = await run_in_threadpool(
                _once, store, route, key, digest, make, recover, success_status
            )
        except IdempotencyConflict as exc:
            return conflict(exc)
    if replay is not None:
        return _replay(*replay)
    if isinstance(result, Response):
        return result
    return JSONResponse(result, status_code=success_status)


async def _store(services: Services, key: str) -> IdempotencyStore:
    check_key(key)
    store = services.idempotency  # opened by the first keyed request (in a thread: it is I/O)
    if store is None:
        store = await run_in_threadpool(idempotency_store, services)
    return store


def _replay_of(
    store: IdempotencyStore,
    route: str,
    key: str,
    stored: Stored,
    recover: Recover | None,
    success_status: int,
) -> tuple[Any, int] | None:
    """What to answer again for a key held already: its kept answer, or what its first
    request made before a crash cut it short (kept now as the key's answer); None when that
    request made nothing, so the work runs."""
    if stored.status is not None:
        return stored.body, stored.status
    if recover is not None:
        found = recover(marker(route, key))
        if found is not None:
            keep_key(store.answer, route, key, success_status, found)
            return found, success_status
    return None


def _once(
    store: IdempotencyStore,
    route: str,
    key: str,
    digest: str,
    make: Make,
    recover: Recover | None,
    success_status: int,
) -> tuple[tuple[Any, int] | None, Any]:
    """In the thread pool: ``((answer, status), None)`` to replay, or ``(None, what make()
    made)`` with the key answered (or released, for a Response)."""
    stored = store.reserve(route, key, digest)
    if stored is not None:
        replay = _replay_of(store, route, key, stored, recover, success_status)
        if replay is not None:
            return replay, None
    token = current_key.set(marker(route, key))
    try:
        result = make()
    except Exception:
        keep_key(store.release, route, key)
        raise
    finally:
        current_key.reset(token)
    if isinstance(result, Response):
        keep_key(store.release, route, key)
        return None, result
    fault_point("idempotency.answer")  # made, not yet answered: the worst moment to die
    keep_key(store.answer, route, key, success_status, result)
    return None, result


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
    """:func:`keep_key` in the thread pool."""
    await run_in_threadpool(keep_key, call, route, key, *args)


def keep_key(call: Callable[..., None], route: str, key: str, *args: Any) -> None:
    """Answer or release a key; a full disk does not turn the request's own outcome into
    an error. The key stays reserved, and its retry finds what this request made (or, if it
    made nothing, runs again)."""
    try:
        call(route, key, *args)
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
    """The submit answer of the task created with ``key`` (a :func:`marker`), if any: the
    folder marked for it (see :func:`runyard.runtime.creation.made_for_key`)."""
    for task_id, folder in services.workspace.iter_task_dirs():
        if not made_for_key(folder, key):
            continue
        status = services.workspace.read_status(task_id)
        if status is not None:
            return {"task_id": task_id, "run_id": status.run_id, "task": status.task_name}
    return None
