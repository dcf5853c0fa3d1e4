"""Options shared by every command, and the settings they build."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from runyard.config import Settings
from runyard.errors import RunyardError

console = Console()
err_console = Console(stderr=True)

WorkspaceOpt = Annotated[
    Path | None,
    typer.Option(
        "--workspace-dir", help="Workspace root (default: $RUNYARD_WORKSPACE_DIR or ./.runyard)"
    ),
]
LogDirOpt = Annotated[
    Path | None, typer.Option("--log-dir", help="Log folder (default: $RUNYARD_LOG_DIR or ./logs)")
]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="Config file (default: ./runyard.yaml if present)")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts")]
UrlOpt = Annotated[
    str | None,
    typer.Option(
        "--url", envvar="RUNYARD_URL", help="Server URL (default: the workspace's server)"
    ),
]
TokenOpt = Annotated[
    str | None, typer.Option("--token", envvar="RUNYARD_TOKEN", help="Bearer token of the server")
]


def load_settings(
    workspace_dir: Path | None, log_dir: Path | None, config: Path | None, **cli: Any
) -> Settings:
    try:
        return Settings.load(
            cli={"workspace_dir": workspace_dir, "log_dir": log_dir, **cli}, config_file=config
        )
    except RunyardError as exc:
        fail(str(exc))


def fail(message: str, code: int = 2) -> NoReturn:
    err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def parse_fields(fields: list[str]) -> dict[str, Any]:
    """``key=value`` pairs; a value is JSON where it parses (``x=1`` is 1), else a string."""
    out: dict[str, Any] = {}
    for item in fields:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            fail(f"expected key=value, got {item!r}")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out
