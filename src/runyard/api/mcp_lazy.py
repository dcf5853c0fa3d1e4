"""``/mcp`` mounted at once, the MCP SDK imported after the port is open.

Importing the SDK (and the pydantic models it builds) takes a large share of the server's
start; nothing else needs it. The route is added when the app is built; the app's
lifespan starts :meth:`LazyMcp.run`, which imports the SDK in a thread, builds the
endpoint of :mod:`runyard.api.mcp.server` and runs its session manager for as long as
the app lives (in a task of its own, as the manager's task group requires). A request
that comes before that waits for it.

The build waits for :meth:`LazyMcp.start_soon` (called once the server's start-up is over,
see api/startup.py) or for the first ``/mcp`` request, whichever comes first: during the
start-up it would take the cores the index and the supervisor need (seconds of CPU at
100,000 tasks), and ``/mcp`` is held back until the start-up is over anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from runyard.api.services import Services
from runyard.changes import ChangeHub

log = logging.getLogger("runyard.api")
MCP_PATH = "/mcp"  # runyard.api.mcp.server.MCP_PATH, without importing it


class LazyMcp:
    """The ``/mcp`` ASGI endpoint; ``run()`` in the app's lifespan makes it answer."""

    def __init__(self, services: Services, hub: ChangeHub, version: str) -> None:
        self._services = services
        self._hub = hub
        self._version = version
        self._app: Any = None
        self._ready = asyncio.Event()
        self._go = asyncio.Event()  # build now (start-up over, a request, or the app stops)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wanted = False
        self.route = Route(MCP_PATH, self, methods=["GET", "POST", "DELETE"])

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        self._ready = asyncio.Event()  # bound to the running loop
        self._go = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if self._wanted:  # start_soon() came first (it reads _loop after setting _wanted)
            self._go.set()
        stop = asyncio.Event()
        task = asyncio.create_task(self._serve(stop))
        try:
            yield
        finally:
            stop.set()
            self._go.set()
            await task
            self._loop = None

    def start_soon(self) -> None:
        """Build the endpoint now; from any thread."""
        self._wanted = True
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._go.set)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._go.set()
        await self._ready.wait()
        if self._app is None:
            raise RuntimeError("MCP is not available on this server (see its log)")
        await self._app(scope, receive, send)

    async def _serve(self, stop: asyncio.Event) -> None:
        await self._go.wait()
        if stop.is_set():
            self._ready.set()
            return
        try:
            endpoint = await asyncio.to_thread(self._build)
        except Exception:
            log.exception("MCP could not be set up; /mcp answers errors")
            self._ready.set()
            await stop.wait()
            return
        async with endpoint.run():
            self._app = endpoint.route.app
            self._ready.set()
            await stop.wait()

    def _build(self) -> Any:
        from runyard.api.mcp.server import McpEndpoint, build_mcp_server

        server = build_mcp_server(self._services, self._hub, self._version)
        return McpEndpoint(server, self._services.settings.max_body_bytes)


def mount_lazy_mcp(app: Any, services: Services, hub: ChangeHub, version: str = "") -> LazyMcp:
    """Add ``/mcp`` to ``app``; run ``endpoint.run()`` in its lifespan."""
    lazy = LazyMcp(services, hub, version)
    app.router.routes.append(lazy.route)
    return lazy
