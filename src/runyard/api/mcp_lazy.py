"""``/mcp`` mounted at once, the MCP SDK imported after the port is open.

Importing the SDK (and the pydantic models it builds) takes a large share of the server's
start; nothing else needs it. The route is added when the app is built; the app's
lifespan starts :meth:`LazyMcp.run`, which imports the SDK in a thread, builds the
endpoint of :mod:`runyard.api.mcp.server` and runs its session manager for as long as
the app lives (in a task of its own, as the manager's task group requires). A request
that comes before that waits for it.
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
        self.route = Route(MCP_PATH, self, methods=["GET", "POST", "DELETE"])

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        self._ready = asyncio.Event()  # bound to the running loop
        stop = asyncio.Event()
        task = asyncio.create_task(self._serve(stop))
        try:
            yield
        finally:
            stop.set()
            await task

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._ready.wait()
        if self._app is None:
            raise RuntimeError("MCP is not available on this server (see its log)")
        await self._app(scope, receive, send)

    async def _serve(self, stop: asyncio.Event) -> None:
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
