"""The CLI starts light: importing it, or building it for one command, loads no server,
runtime, repository, HTTP client, settings machinery or rich (they load when a command
runs). A new heavy import at the top of any command module turns these red."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    "fastapi", "starlette", "uvicorn", "httpx", "pydantic", "pydantic_settings", "rich",
    "asyncio", "runyard.api", "runyard.repository", "runyard.runtime", "runyard.client",
    "runyard.config", "runyard.workspace", "runyard.tasks", "runyard.executors",
)  # fmt: skip


def _loaded(code: str) -> list[str]:
    probe = f"""
import json, sys
{code}
heavy = {HEAVY!r}
print(json.dumps(sorted(m for m in sys.modules if m in heavy or m.startswith(tuple(h + "." for h in heavy)))))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_importing_the_cli_loads_nothing_heavy() -> None:
    assert _loaded("import runyard.cli.main") == []


def test_building_the_help_and_one_command_loads_nothing_heavy() -> None:
    # what typer does before running a command: turn the app into click commands, all of
    # them for --help, one for a command; evaluating a signature must not import a model
    code = """
import typer.main
from runyard.cli.main import app
typer.main.get_command(app)
typer.main.get_command(app.for_args(["ls"]))
typer.main.get_command(app.for_args(["agent", "ls"]))
"""
    assert _loaded(code) == []


def test_the_help_is_printed_without_heavy_imports() -> None:
    code = """
import contextlib, io
from runyard.cli.main import app
sys.argv = ["runyard", "--help"]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        app()
    except SystemExit:
        pass
"""
    assert _loaded(code) == []
