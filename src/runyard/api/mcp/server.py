"""The MCP server: the Job API as tools, task records as resources, on two transports.

* Streamable HTTP at ``/mcp`` on the runyard server itself (:func:`mount_mcp`): behind the
  same request guard and bearer auth as every route, so a run token reaching ``/mcp``
  acts as its run exactly as on ``/jobs`` (``request.state.run_scope``).
* stdio (``runyard mcp``): the same server object over stdin/stdout, acting as the admin
  of the workspace it was started for.

Stateless HTTP with JSON answers: no MCP session outlives a request, so nothing has to be
tied to a credential between requests — each request's own token decides its scope::

    endpoint = mount_mcp(app, services, hub)
    async with endpoint.run():      # inside the app's lifespan
        ...
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.requests import Request
from starlette.routing import Route

from runyard.agents.models import RunScope
from runyard.api.mcp import MCP_PATH
from runyard.api.mcp.early import INSTRUCTIONS
from runyard.api.mcp.resources import definition_resources, read_resource, resource_templates
from runyard.api.mcp.tools import call_tool, tool_list
from runyard.api.scopes import request_scope
from runyard.api.services import Services
from runyard.changes import ChangeHub

Ctx = ServerRequestContext[Any, Any]


def scope_of(ctx: Ctx) -> RunScope | None:
    """The run a request acts as: from its HTTP request, None (admin) on stdio."""
    request = ctx.request
    return request_scope(request) if isinstance(request, Request) else None


def build_mcp_server(services: Services, hub: ChangeHub, version: str = "") -> Server[Any]:
    """The lowlevel MCP server answering from ``services`` (shared by both transports)."""

    async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        return types.ListToolsResult(tools=tool_list(services, scope_of(ctx)))

    async def on_call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        return await call_tool(services, hub, params.name, params.arguments, scope_of(ctx))

    async def list_resources(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        return types.ListResourcesResult(resources=definition_resources(services))

    async def list_templates(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        return types.ListResourceTemplatesResult(resource_templates=resource_templates())

    async def on_read_resource(ctx: Ctx, params: types.ReadResourceRequestParams) -> Any:
        return await read_resource(services, str(params.uri), scope_of(ctx))

    return Server(
        "runyard",
        version=version,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=on_call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=on_read_resource,
    )


class McpEndpoint:
    """``/mcp`` on an app: the route, and the session manager the app's lifespan runs."""

    def __init__(self, server: Server[Any], max_body_bytes: int) -> None:
        # Host/Origin are checked by the app's RequestGuard, before auth: the SDK's own
        # check stays off so there is one rule for every route.
        self.manager = StreamableHTTPSessionManager(
            server, json_response=True, stateless=True, max_request_body_size=max_body_bytes
        )
        self.route = Route(
            MCP_PATH, StreamableHTTPASGIApp(self.manager), methods=["GET", "POST", "DELETE"]
        )

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield


def mount_mcp(app: Any, services: Services, hub: ChangeHub, version: str = "") -> McpEndpoint:
    """Add ``/mcp`` to ``app`` (a FastAPI/Starlette app); run ``endpoint.run()`` in its
    lifespan."""
    endpoint = McpEndpoint(
        build_mcp_server(services, hub, version), services.settings.max_body_bytes
    )
    app.router.routes.append(endpoint.route)
    return endpoint
