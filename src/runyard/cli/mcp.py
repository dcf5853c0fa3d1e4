"""``runyard mcp``: an MCP server on stdin/stdout for desktop clients (see docs/mcp.md)."""

from __future__ import annotations

from runyard.cli.common import ConfigOpt, LogDirOpt, TokenOpt, UrlOpt, WorkspaceOpt, load_settings


def mcp(
    url: UrlOpt = None,
    token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None,
    log_dir: LogDirOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Serve MCP on stdio: relayed to the workspace's running server, else from the files."""
    import asyncio

    from runyard.api.app import runyard_version
    from runyard.api.mcp.relay import relay
    from runyard.api.mcp.stdio import serve_files
    from runyard.cli.backend import locate_server
    from runyard.client import Client

    settings = load_settings(workspace_dir, log_dir, config)
    located = locate_server(settings, url, token)
    # a recorded server that does not answer has stopped: the files are the truth then
    if located is not None and (url is not None or Client(*located).health()):
        asyncio.run(relay(*located))
    else:
        asyncio.run(serve_files(settings, runyard_version()))
