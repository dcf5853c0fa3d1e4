"""MCP over stdio (``runyard mcp``): relay to the workspace's server, or serve the files.

* A server runs for the workspace (``--url``, or the address in ``server.json``, answering
  ``/health``): every message is relayed to its ``/mcp`` with its bearer token, so desktop
  clients get exactly what HTTP clients get, and tasks run under that server
  (api/mcp/relay.py: it ends when stdin closes and answers every call, the server dead or not).
* No server: the same MCP server object answers here, over the workspace's files, as the
  file-mode commands do (``runyard run``, ``ls``): submitted tasks run in worker processes
  this command supervises while it runs — a server started later adopts them. No agent-run
  backend is started (it belongs to ``serve``).

Nothing but MCP messages is written to stdout (the SDK points fd 1 at stderr while it
serves, so stray output cannot corrupt the wire)::

    asyncio.run(serve_files(settings))
"""

from __future__ import annotations

from mcp.server.stdio import stdio_server
from starlette.concurrency import run_in_threadpool

from runyard.api.mcp.server import build_mcp_server
from runyard.api.services import Services
from runyard.config import Settings
from runyard.repository import TaskRepository
from runyard.runtime.supervisor import Supervisor
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace


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
