"""runyard as an MCP server (tools = the Task Job API's jobs, resources = task records).

The SDK loads with :mod:`runyard.api.mcp.server`, on first use of its names here, so the
stdio relay (:mod:`runyard.api.mcp.relay`) starts without it.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

MCP_PATH = "/mcp"

__all__ = ["MCP_PATH", "McpEndpoint", "build_mcp_server", "mount_mcp"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(import_module("runyard.api.mcp.server"), name)
    raise AttributeError(f"module 'runyard.api.mcp' has no attribute {name!r}")
