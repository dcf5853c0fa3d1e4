"""runyard as an MCP server (tools = the Task Job API's jobs, resources = task records)."""

from runyard.api.mcp.server import MCP_PATH, McpEndpoint, build_mcp_server, mount_mcp

__all__ = ["MCP_PATH", "McpEndpoint", "build_mcp_server", "mount_mcp"]
