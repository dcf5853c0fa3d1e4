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

    from runyard.cli.backend import locate_server

    settings = load_settings(workspace_dir, log_dir, config)
    located = locate_server(settings, url, token)
    # a recorded server that does not answer has stopped: the files are the truth then
    if located is not None and (url is not None or _answers(*located)):
        from runyard.api.mcp.relay import relay

        probe, connect = settings.mcp_relay_probe_seconds, settings.mcp_relay_connect_seconds
        asyncio.run(relay(*located, probe, connect))
    else:
        from runyard.api.mcp.early import Opening, answer_initialize, read_first_line
        from runyard.cli.facts import runyard_version

        # the SDK and the services load in about a second: initialize is answered first
        version = runyard_version()
        line = read_first_line(0)
        opening = Opening(line, answer_initialize(line, version, 1))
        from runyard.api.mcp.stdio import serve_files

        asyncio.run(serve_files(settings, version, opening))


def _answers(url: str, token: str | None) -> bool:
    """Whether the server at ``url`` answers its health check (over the standard
    library's HTTP where that reaches it: the relay should not wait for a client)."""
    from runyard.client.plain import PlainClient, plain_reaches

    if plain_reaches(url):
        return PlainClient(url, token, timeout=10.0).health()
    from runyard.client import Client

    with Client(url, token, timeout=10.0) as client:
        return client.health()
