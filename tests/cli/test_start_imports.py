"""The CLI starts light: importing it, or building it for one command, loads no server,
runtime, repository, HTTP client, settings machinery or rich (they load when a command
runs). A new heavy import at the top of any command module turns these red.

``runyard ls`` itself, run to the end, loads only what its answer needs: on the files no
settings model, HTTP client or runtime (with a config file, the settings model checks it);
over HTTP no httpx, no record models and no pydantic at all (typer's own coercion of options
goes through pydantic: plain values are taken as they are); printed to a pipe, no rich."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from serverproc import start_server

HEAVY = (
    "fastapi", "starlette", "uvicorn", "httpx", "pydantic", "pydantic_settings", "rich",
    "asyncio", "runyard.api", "runyard.repository", "runyard.runtime", "runyard.client",
    "runyard.config", "runyard.workspace", "runyard.tasks", "runyard.executors",
)  # fmt: skip


def _loaded(
    code: str, heavy: tuple[str, ...] = HEAVY, cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> list[str]:  # fmt: skip
    probe = f"""
import json, sys
{code}
heavy = {heavy!r}
print(json.dumps(sorted(m for m in sys.modules if m in heavy or m.startswith(tuple(h + "." for h in heavy)))))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=cwd,
        env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def _ls(*args: str) -> str:
    """The code that runs ``runyard ls ARGS`` to its end in the probe's process."""
    return f"""
from runyard.cli.main import main
sys.argv = ["runyard", "ls", *{args!r}]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
"""


def _workspace(root: Path) -> dict[str, str]:
    """A workspace in ``root`` with one finished task; the environment to read it with."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    made = subprocess.run(
        [sys.executable, "-m", "runyard", "run", "demo", "x=1", "y=2", "--name", "one"],
        cwd=root, env=env, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return env


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


SETTINGS = ("runyard.config", "pydantic_settings", "yaml")
# typer's pydantic coercion of options (runyard.cli.coercion takes plain values as they are)
TYPER_COERCION = ("typer._adapters",)
LS_FILES_SPARES = (
    *SETTINGS, "httpx", "runyard.client.sync", "runyard.runtime", "runyard.api", "fastapi",
    "uvicorn", "rich", "watchfiles", "inotify_simple", *TYPER_COERCION,
)  # fmt: skip


def test_ls_on_the_files_loads_no_settings_model_http_client_or_runtime(tmp_path: Path) -> None:
    env = _workspace(tmp_path)
    assert _loaded(_ls(), LS_FILES_SPARES, tmp_path, env) == []
    assert _loaded(_ls("--json"), LS_FILES_SPARES, tmp_path / ".runyard", env) == []
    # a config file is read and checked by the settings model, as for every command
    (tmp_path / "runyard.yaml").write_text("workspace_dir: .runyard\n")
    assert set(SETTINGS) <= set(_loaded(_ls(), LS_FILES_SPARES, tmp_path, env))
    (tmp_path / "runyard.yaml").unlink()
    with_port = {**env, "RUNYARD_PORT": "9999"}  # a setting a Place does not read
    assert "runyard.config" in _loaded(_ls(), LS_FILES_SPARES, tmp_path, with_port)


LS_HTTP_SPARES = (
    *SETTINGS, "httpx", "runyard.client.sync", "runyard.wire", "runyard.repository",
    "runyard.workspace", "runyard.runtime", "rich", "pydantic", "pydantic_core",
    *TYPER_COERCION,
)  # fmt: skip


def test_ls_over_http_loads_no_http_client_models_or_settings(tmp_path: Path) -> None:
    env = _workspace(tmp_path)
    server = start_server(tmp_path / "srv", workspace=tmp_path / ".runyard")
    try:
        # the server recorded in the workspace, found upwards; then one named by the
        # environment (its token with it)
        assert _loaded(_ls(), LS_HTTP_SPARES, tmp_path, env) == []
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        by_env = {**env, **{k: v for k, v in server.cli_env().items() if k.startswith("RUNYARD_")}}
        assert _loaded(_ls("--json"), LS_HTTP_SPARES, elsewhere, by_env) == []
        assert _loaded(_ls("--limit", "2", "--state", "succeeded"), LS_HTTP_SPARES, tmp_path,
                       env) == []  # fmt: skip
        # --cursor reads one status through the Client: its models load then, as they may
        with_cursor = _loaded(_ls("--cursor", "base#demo#one"), LS_HTTP_SPARES, tmp_path, env)
        assert {"httpx", "runyard.wire"} <= set(with_cursor)
        # a value typer must convert goes to typer's own coercion (pydantic), as it may
        assert "typer._adapters" in _loaded(_ls("--limit", "+2"), LS_HTTP_SPARES, tmp_path, env)
    finally:
        server.stop()


def test_ls_leaves_the_collector_nothing_to_walk_but_what_it_made_since(tmp_path: Path) -> None:
    # the heap the imports made is frozen before the command runs (no full collection walks
    # typer's objects again) and once it is over (the interpreter's last collections at exit
    # walk next to nothing): together about 30 ms of a listing on the files
    env = _workspace(tmp_path)
    watch = """
import gc
import runyard.cli.main
started = []
gc.callbacks.append(lambda phase, info: phase == "start" and started.append(gc.get_freeze_count()))
"""
    check = """
assert started and min(started) > 0, started
left, frozen = len(gc.get_objects()), gc.get_freeze_count()
assert left * 10 < frozen, (left, frozen)
"""
    assert _loaded(watch + _ls() + check, (), tmp_path, env) == []


def test_ls_on_the_files_imports_the_repository_with_no_collection(tmp_path: Path) -> None:
    # pydantic and the models are made once and kept: a collection while they are being
    # made walks them all and finds nothing, and so would one after it, had they not been
    # frozen with the rest
    env = _workspace(tmp_path)
    watch = """
import gc
import runyard.cli.main
during, after = [], []

def collecting(phase, info):
    module = sys.modules.get("runyard.repository")
    if phase != "start" or module is None:
        return
    if getattr(module.__spec__, "_initializing", False):
        during.append(info)
    else:
        after.append((len(gc.get_objects()), gc.get_freeze_count()))

gc.callbacks.append(collecting)
"""
    check = """
assert "runyard.repository" in sys.modules and not during, f"{len(during)} collections"
assert all(left * 10 < frozen for left, frozen in after), after
"""
    assert _loaded(watch + _ls() + check, (), tmp_path, env) == []
