"""``runyard serve``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from runyard.cli.common import ConfigOpt, LogDirOpt, WorkspaceOpt, fail, load_settings
from runyard.errors import RunyardError

MAX_TOKEN_FILE_BYTES = 4096
TOKEN_ON_COMMAND_LINE = (
    "warning: --token on the command line can be read by other local users (ps, "
    "/proc/<pid>/cmdline while the server starts) and stays in your shell's history; "
    "use --token-file PATH or RUNYARD_TOKEN instead"
)


def serve(
    ctx: typer.Context,
    workspace_dir: WorkspaceOpt = None,
    log_dir: LogDirOpt = None,
    config: ConfigOpt = None,
    host: Annotated[str | None, typer.Option(help="Address to bind (default 127.0.0.1)")] = None,
    port: Annotated[
        int | None, typer.Option(help="Port (default 8765; 0 picks a free one)")
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="RUNYARD_TOKEN",
            help="Require this bearer token (default: the one kept in server.json, else a new "
            "one). On the command line others can see it: prefer --token-file or RUNYARD_TOKEN",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option("--token-file", help="Read the bearer token from this file (one line)"),
    ] = None,
    rotate_token: Annotated[
        bool,
        typer.Option(
            "--rotate-token", help="Make a new token instead of reusing the one in server.json"
        ),
    ] = False,
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

    Without a configured token the server reuses the one it kept in <workspace>/server.json
    (readable by you only; the CLI finds it there), or makes one. The Studio link it prints
    holds a one-time login code, never the token; `runyard studio` prints another.
    """
    from runyard.api.server import serve as run_server

    if token is not None and token_file is not None:
        fail("--token and --token-file both name a token: give one of them")
    if token is not None and _from_command_line(ctx, "token"):
        print(TOKEN_ON_COMMAND_LINE, file=sys.stderr, flush=True)
    if token_file is not None:
        token = read_token_file(token_file)
    auth = False if no_auth else None
    level = {"log_level": log_level.lower()} if log_level else {}
    settings = load_settings(
        workspace_dir, log_dir, config, host=host, port=port, token=token, auth=auth, **level
    )
    try:
        run_server(settings, rotate_token=rotate_token)
    except RunyardError as exc:
        fail(str(exc))


def read_token_file(path: Path) -> str:
    """The token on the file's first line; a clear error for a file that holds none."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_TOKEN_FILE_BYTES + 1)
    except OSError as exc:
        fail(f"--token-file {path}: {exc.strerror}")
    if len(raw) > MAX_TOKEN_FILE_BYTES:
        fail(f"--token-file {path}: longer than {MAX_TOKEN_FILE_BYTES} bytes; a token is one line")
    lines = raw.decode("utf-8", "replace").strip().splitlines()
    token = lines[0].strip() if lines else ""
    if not token or len(lines) > 1 or not all("!" <= ch <= "~" for ch in token):
        fail(
            f"--token-file {path}: expected one line holding the token (printable ASCII, no spaces)"
        )
    return token


def _from_command_line(ctx: typer.Context, name: str) -> bool:
    # by name: typer carries its own copy of click, whose enum is not click's
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"
