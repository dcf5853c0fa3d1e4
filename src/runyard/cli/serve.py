"""``runyard serve``."""

from __future__ import annotations

from typing import Annotated

import typer

from runyard.cli.common import ConfigOpt, LogDirOpt, WorkspaceOpt, fail, load_settings
from runyard.errors import RunyardError


def serve(
    workspace_dir: WorkspaceOpt = None,
    log_dir: LogDirOpt = None,
    config: ConfigOpt = None,
    host: Annotated[str | None, typer.Option(help="Address to bind (default 127.0.0.1)")] = None,
    port: Annotated[
        int | None, typer.Option(help="Port (default 8765; 0 picks a free one)")
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(envvar="RUNYARD_TOKEN", help="Require this bearer token (default: generated)"),
    ] = None,
    no_auth: Annotated[
        bool,
        typer.Option("--no-auth", help="Serve without any token (loopback only; not advised)"),
    ] = False,
    log_level: Annotated[
        str | None,
        typer.Option(
            "--log-level",
            help="Level of <log_dir>/server.log: debug, info (default: with access lines), "
            "warning or error",
        ),
    ] = None,
) -> None:
    """Start the server: Task Job API, agent-run API and Studio on one workspace.

    Without a token, one is generated; it is recorded with the server's address in
    <workspace>/server.json (readable by you only), where the CLI finds it.
    """
    from runyard.api.server import serve as run_server

    auth = False if no_auth else None
    level = {"log_level": log_level.lower()} if log_level else {}
    settings = load_settings(
        workspace_dir, log_dir, config, host=host, port=port, token=token, auth=auth, **level
    )
    try:
        run_server(settings)
    except RunyardError as exc:
        fail(str(exc))
