"""MCP over stdio (``runyard mcp``): relay to the workspace's server, or serve the files.

* A server runs for the workspace (``--url``, or the address in ``server.json``, answering
  ``/health``): every message is relayed to its ``/mcp`` with its bearer token, so desktop
  clients get exactly what HTTP clients get, and tasks run under that server.
* No server: the same MCP server object answers here, over the workspace's files, as the
  file-mode commands do (``runyard run``, ``ls``): submitted tasks run in worker processes
  this command supervises while it runs — a server started later adopts them. No agent-run
  backend is started (it belongs to ``serve``).

Nothing but MCP messages is written to stdout (the SDK points fd 1 at stderr while it
serves, so stray output cannot corrupt the wire)::

    asyncio.run(relay("http://127.0.0.1:8765", token))   # or
    asyncio.run(serve_files(settings))
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared._httpx_utils import create_mcp_http_client
from starlette.concurrency import run_in_threadpool

from runyard.api.mcp.server import MCP_PATH, build_mcp_server
from runyard.api.services import Services
from runyard.config import Settings
from runyard.repository import TaskRepository
from runyard.runtime.supervisor import Supervisor
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace

log = logging.getLogger("runyard.api.mcp")


async def relay(url: str, token: str | None) -> None:
    """Pipe stdio to ``<url>/mcp`` until stdin closes."""
    from mcp.client.streamable_http import streamable_http_client

    headers = {"authorization": f"Bearer {token}"} if token else {}
    endpoint = url.rstrip("/") + MCP_PATH
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(endpoint, http_client=http) as (remote_in, remote_out),
        stdio_server() as (local_in, local_out),
        anyio.create_task_group() as group,
    ):
        group.start_soon(_pump, remote_in, local_out, "server")
        await _pump(local_in, remote_out, "client")
        group.cancel_scope.cancel()  # the client went away: stop reading the server


async def _pump(source: Any, sink: Any, side: str) -> None:
    async for message in source:
        if isinstance(message, Exception):
            log.warning("dropped an unreadable message from the %s: %s", side, message)
            continue
        await sink.send(message)


def file_services(settings: Settings) -> Services:
    """Repository and supervisor over the workspace files, without the agent-run backend."""
    workspace = Workspace.open(settings.workspace_dir, settings.log_dir)
    workspace.ensure()
    registry = TaskRegistry.load()
    repository = TaskRepository(workspace)
    supervisor = Supervisor(settings, workspace, registry, on_change=repository.refresh)
    supervisor.on_created = repository.take_created
    return Services(settings, workspace, registry, repository, supervisor)


async def serve_files(settings: Settings, version: str = "") -> None:
    """Answer MCP on stdio from the workspace files until stdin closes."""
    services = file_services(settings)
    hub = services.changes
    await run_in_threadpool(services.start)
    hub.follow(services.repository)
    try:
        server = build_mcp_server(services, hub, version)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        hub.unfollow()
        await run_in_threadpool(services.stop)
