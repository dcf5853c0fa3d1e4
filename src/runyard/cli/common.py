"""Options shared by every command, and the settings they build."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from runyard.errors import RunyardError

if TYPE_CHECKING:
    from rich.console import Console

    from runyard.cli.locate import Place
    from runyard.config import Settings

T = TypeVar("T")


class _LazyConsole:
    """A rich ``Console`` made on first use: importing rich costs more than most commands'
    own work, and ``--help`` or a JSON answer never needs it."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def get(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)

    # special methods are looked up on the type, not through __getattr__ (``Live`` enters it)
    def __enter__(self) -> Console:
        return self.get().__enter__()

    def __exit__(self, *exc_info: Any) -> None:
        self.get().__exit__(*exc_info)


console: Console = _LazyConsole()  # type: ignore[assignment]
err_console: Console = _LazyConsole(stderr=True)  # type: ignore[assignment]

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
    """The settings of this command. With no workspace named by an option, the environment
    or a config file, it is found by walking up from here (see ``runyard.cli.locate``)."""
    from runyard.cli.locate import settings_found_upwards

    return _found(
        settings_found_upwards, {"workspace_dir": workspace_dir, "log_dir": log_dir, **cli}, config
    )


def load_place(
    workspace_dir: Path | None, log_dir: Path | None, config: Path | None
) -> Place | Settings:
    """Where a command that only reads the workspace or asks its server works: found as
    :func:`load_settings` finds it, without the settings model when nothing else is set."""
    from runyard.cli.locate import place_found_upwards

    return _found(place_found_upwards, {"workspace_dir": workspace_dir, "log_dir": log_dir}, config)


def _found(
    find: Callable[[dict[str, Any], Path | None], T], cli: dict[str, Any], config: Path | None
) -> T:
    from runyard.privacy import PRIVATE, restrict_process

    try:
        found = find(cli, config)
    except RunyardError as exc:
        fail(str(exc))
    # whatever this command writes in the workspace (file mode, backup, sync, mcp) is made
    # with the mode's permissions; a Place is found only when nothing sets workspace_mode
    restrict_process(getattr(found, "workspace_mode", PRIVATE))
    return found


def fail(message: str, code: int = 2) -> NoReturn:
    from rich.markup import escape  # rich is imported only when something is printed

    # the message is text, not markup: "[worker]" in a field's path must print as written
    err_console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
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
