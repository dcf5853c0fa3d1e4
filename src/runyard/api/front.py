"""The server's first moments: the port listens before the app is built.

Importing FastAPI, the routes and the record models and building the app costs most of a
second of CPU. ``serve`` binds and listens first and serves a :class:`Front` at once; the
app is built meanwhile in a thread (the services, then ``create_app``) and started (its
lifespan: the index and the supervisor start in the background, see api/startup.py).

Until then ``GET /health`` is answered here, behind the same guard as always (Host, Origin,
CORS, auth), in its usual shape with ``indexing: {"done": 0, "total": 0}`` (no folder listed
yet). Every other request waits for the app, up to :data:`~runyard.api.startup.WAIT_SECONDS`,
and is then handed to it, which checks it as every request; past that it is answered 503 with
``Retry-After`` behind the guard (a bearer token that cannot be verified yet counts as one
that may be valid: a stranger without one gets the 401). A build that fails ends the server
with its error. Once the app runs, the front hands everything to it.

>>> front = Front(settings, build, on_built=start_agent_socket, on_failed=stop_server)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runyard.api.auth import BearerAuth
from runyard.api.guard import HostPolicy, RequestGuard
from runyard.api.startup import WAIT_SECONDS, unavailable
from runyard.config import Settings
from runyard.errors import RunyardError
from runyard.workspace.space import storage_report

log = logging.getLogger("runyard.api")

HEALTH = "/health"
READY_VALUES = ("1", "true", "on", "yes")  # FastAPI's true values of a bool query
Build = Callable[[], tuple[Any, ASGIApp]]  # -> (services, app)


class Front:
    """The ASGI app the port serves from its first moment (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        build: Build,
        on_built: Callable[[Any, ASGIApp], None],
        on_failed: Callable[[BaseException], None],
    ) -> None:
        self.settings = settings
        self.failure: BaseException | None = None
        self._build = build
        self._on_built = on_built
        self._on_failed = on_failed
        self._app: ASGIApp | None = None
        self._lifespan: _Lifespan | None = None
        self._settled = asyncio.Event()
        self._stopping = False
        self._building: asyncio.Task[None] | None = None
        self._health = guarded(_EarlyHealth(settings), settings, verify_run_token=None)
        self._refusal = guarded(_starting, settings, verify_run_token=_unverifiable)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is not None:
            await self._app(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._run_lifespan(receive, send)
        elif scope["type"] == "http" and scope["path"] == HEALTH and scope["method"] == "GET":
            await self._health(scope, receive, send)
        elif await self._built():
            assert self._app is not None
            await self._app(scope, receive, send)
        else:
            await self._refusal(scope, receive, send)

    async def _built(self) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._settled.wait(), WAIT_SECONDS)
        return self._app is not None

    async def _run_lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup: answered at once, the port opens now
        self._building = asyncio.create_task(self._build_and_start())
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        self._stopping = True
        await asyncio.shield(self._building)  # a build in its thread cannot be cut short
        if self._lifespan is not None:
            await self._lifespan.stop()
        await send({"type": "lifespan.shutdown.complete"})

    async def _build_and_start(self) -> None:
        try:
            services, app = await asyncio.to_thread(self._build)
            if self._stopping:
                return
            self._lifespan = _Lifespan(app)
            await self._lifespan.start()
            self._app = app
            self._on_built(services, app)
        except Exception as exc:
            # a RunyardError says what to fix (serve prints it); anything else is a fault
            fault = not isinstance(exc, RunyardError)
            log.error("the server could not build its app (%s); stopping", exc, exc_info=fault)
            self.failure = exc
            self._on_failed(exc)
        finally:
            self._settled.set()


def guarded(app: ASGIApp, settings: Settings, verify_run_token: Any) -> ASGIApp:
    """``app`` behind the app's own edge: auth inside CORS (configured origins only) inside
    the Host/Origin guard, in the order create_app installs them."""
    inner: ASGIApp = BearerAuth(app, settings.token, verify_run_token)
    if settings.allowed_origins:
        from starlette.middleware.cors import CORSMiddleware

        inner = CORSMiddleware(
            inner,
            allow_origins=settings.allowed_origins,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=["authorization", "content-type", "last-event-id", "range"],
        )
    return RequestGuard(inner, HostPolicy.for_settings(settings), settings.allowed_origins)


def _unverifiable(token: str) -> bool:
    """A run token cannot be checked before the services exist: it may be valid."""
    return True


async def _starting(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1013})  # try again later
        return
    await unavailable(scope["path"], "building its app")(scope, receive, send)


class _EarlyHealth:
    """``/health`` before the app exists, in the shape of api/storage.py's answer."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        settings = self.settings
        storage = storage_report(Path(settings.workspace_dir), settings.min_free_mb)
        storage["unwritten"] = 0  # only a running supervisor holds unwritten records
        answer = {"running": True, "storage": storage, "indexing": {"done": 0, "total": 0}}
        body = json.dumps(
            {"answer": answer, "success": True, "metadata": {}},
            ensure_ascii=False, allow_nan=False, separators=(",", ":"),
        ).encode()  # fmt: skip
        headers = [(b"content-length", str(len(body)).encode()),
                   (b"content-type", b"application/json")]  # fmt: skip
        status = 503 if _asks_ready(scope) else 200  # not ready: the app is not even built
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _asks_ready(scope: Scope) -> bool:
    """``?ready=`` with a true value, as the app's ``/health`` reads it."""
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    return any(value.lower() in READY_VALUES for value in query.get("ready", []))


class _Lifespan:
    """Runs an ASGI app's lifespan by hand: the front answered uvicorn's at once."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._to_app: asyncio.Queue[Message] = asyncio.Queue()
        self._from_app: asyncio.Queue[Message] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": {}}
        self._task = asyncio.create_task(self._run(scope))
        await self._to_app.put({"type": "lifespan.startup"})
        await self._expect("lifespan.startup.complete")

    async def _run(self, scope: Scope) -> None:
        await self.app(scope, self._to_app.get, self._from_app.put)

    async def stop(self) -> None:
        await self._to_app.put({"type": "lifespan.shutdown"})
        await self._expect("lifespan.shutdown.complete")
        assert self._task is not None
        await self._task

    async def _expect(self, wanted: str) -> None:
        assert self._task is not None
        answer = asyncio.ensure_future(self._from_app.get())
        await asyncio.wait({answer, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not answer.done():
            answer.cancel()
            self._task.result()  # the app's own error, if it raised
            raise RuntimeError(f"the app ended its lifespan before {wanted}")
        message = answer.result()
        if message["type"] != wanted:
            raise RuntimeError(message.get("message") or f"{message['type']} instead of {wanted}")
