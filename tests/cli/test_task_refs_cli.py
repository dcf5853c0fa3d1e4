"""``runyard status api-demo``: every command that takes a task id takes the task's unique
name, ``type:name`` or the id with ``:`` (no shell quoting), against a server and in the
files alike; a name of several tasks lists their full ids and exits 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cli_proc import cli

from serverproc import ServerProcess

TWINS = ("base#command#api-demo", "base#demo#api-demo")


def _files_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    return subprocess.run(
        [sys.executable, "-m", "runyard", *args], cwd=cwd, env={**env, "COLUMNS": "200"},
        capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _check_names(run: object, make: tuple[str, ...]) -> None:
    """The same checks through ``run`` (a server's CLI or the files'); ``make`` is the
    command that makes a task there and waits for it."""
    status = run("status", "api-demo", "--json")  # type: ignore[operator]
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["task_id"] == "base#demo#api-demo"
    for ref in ("base:demo:api-demo", "demo:api-demo", "base:api-demo"):
        shown = run("status", ref, "--json")  # type: ignore[operator]
        assert json.loads(shown.stdout)["task_id"] == "base#demo#api-demo", shown.stderr
    logs = run("logs", "api-demo")  # type: ignore[operator]
    assert logs.returncode == 0 and "Demo result=3" in logs.stdout, logs.stderr
    runs = run("runs", "base:demo:api-demo", "--json")  # type: ignore[operator]
    assert json.loads(runs.stdout)["task_id"] == "base#demo#api-demo", runs.stderr
    graph = run("graph", "api-demo")  # type: ignore[operator]
    assert "lineage of base#demo#api-demo" in graph.stdout, graph.stderr
    cancelled = run("cancel", "api-demo")  # type: ignore[operator]
    assert "base#demo#api-demo already finished" in cancelled.stdout, cancelled.stderr
    # now a second task of that name: ambiguous, every match listed, nothing done
    made = run(*make, "command", "command=echo", "--name", "api-demo")  # type: ignore[operator]
    assert made.returncode == 0, made.stderr
    for args in (("status", "api-demo"), ("runs", "api-demo"), ("rm", "api-demo")):
        twice = run(*args)  # type: ignore[operator]
        assert twice.returncode == 2, (args, twice.stdout, twice.stderr)
        assert all(task_id in twice.stderr for task_id in TWINS), twice.stderr
    missing = run("status", "nope")  # type: ignore[operator]
    assert missing.returncode == 1 and "nope does not exist" in missing.stderr
    removed = run("rm", "command:api-demo")  # type: ignore[operator]
    assert removed.stdout.strip() == "deleted base#command#api-demo", removed.stderr
    assert run("status", "api-demo").returncode == 0  # type: ignore[operator]


def test_names_and_the_colon_form_through_the_server(server: ServerProcess) -> None:
    made = cli(server, "submit", "demo", "x=1", "y=2", "--name", "api-demo", "--wait")
    assert made.returncode == 0, made.stderr
    _check_names(lambda *args: cli(server, *args), ("submit", "--wait"))


def test_names_and_the_colon_form_in_the_files(tmp_path: Path) -> None:
    made = _files_cli(tmp_path, "run", "demo", "x=1", "y=2", "--name", "api-demo")
    assert made.returncode == 0, made.stderr
    _check_names(lambda *args: _files_cli(tmp_path, *args), ("run",))
    child = _files_cli(tmp_path, "run", "demo", "x=1", "y=1", "--source", "demo:api-demo", "--json")
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout)["config"]["source_tasks"] == "base#demo#api-demo"
    orphan = _files_cli(tmp_path, "run", "demo", "x=1", "y=1", "--source", "nope")
    assert orphan.returncode == 1 and "Task nope does not exist" in orphan.stderr
