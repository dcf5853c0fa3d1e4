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

An ``initialize`` the command answered before loading the SDK (api/mcp/early.py) comes in
as ``opening``: its line is replayed to the SDK first, and the SDK's answer to it dropped.
"""

from __future__ import annotations

import sys
from typing import Any

import mcp.types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from starlette.concurrency import run_in_threadpool

from runyard.api.mcp.early import Opening
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


async def serve_files(settings: Settings, version: str = "", opening: Opening = Opening()) -> None:
    """Answer MCP on stdio from the workspace files until stdin closes; ``opening`` is
    what was read (and perhaps answered) before."""
    services = file_services(settings)
    hub = services.changes
    await run_in_threadpool(services.start)
    hub.follow(services.repository)
    try:
        server = build_mcp_server(services, hub, version)
        async with stdio_server() as (read, write):
            read, write = continued(opening, read, write)
            await server.run(read, write, server.create_initialization_options())
    finally:
        hub.unfollow()
        await run_in_threadpool(services.stop)


def continued(opening: Opening, read: Any, write: Any) -> tuple[Any, Any]:
    """The SDK's streams, carrying on from ``opening``: its line read first, and the
    answer to the id already answered dropped once."""
    if not opening.line.strip():
        return read, write
    try:
        first: Any = SessionMessage(
            types.jsonrpc_message_adapter.validate_json(opening.line, by_name=False)
        )
    except Exception as exc:  # noqa: BLE001 - the SDK's reader hands on a bad line alike
        first = exc
    return Replayed(first, read), WithoutAnswer(opening.answered_id, write)


class Replayed:
    """A read stream that yields ``first``, then what ``inner`` yields."""

    def __init__(self, first: Any, inner: Any) -> None:
        self._first: list[Any] = [first]
        self._inner = inner

    @property
    def last_context(self) -> Any:
        return None if self._first else getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        return self._first.pop() if self._first else await self._inner.receive()

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Replayed:
        return self

    async def __anext__(self) -> Any:
        return self._first.pop() if self._first else await self._inner.__anext__()

    async def __aenter__(self) -> Replayed:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class WithoutAnswer:
    """A write stream that drops the first answer to ``answered_id`` (None: drops none)."""

    def __init__(self, answered_id: int | str | None, inner: Any) -> None:
        self._pending = answered_id
        self._inner = inner

    async def send(self, item: SessionMessage) -> None:
        message = item.message
        if self._pending is not None and getattr(message, "id", None) == self._pending:
            self._pending = None
            if isinstance(message, types.JSONRPCError):  # ours said yes: say why it was no
                print(f"runyard mcp: the SDK refused initialize: {message.error}", file=sys.stderr)
            return
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> WithoutAnswer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
