"""The CLI finds its workspace upwards as git does, says so when there is none, prints
``--version``, completes commands (whole groups too), and shows people a status (times in
local time with the zone named, the result in full) and a definition (a table of fields)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from importlib.metadata import version
from pathlib import Path
from zoneinfo import ZoneInfo


def runyard(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RUNYARD_", "_RUNYARD"))}
    return subprocess.run(
        [sys.executable, "-m", "runyard", *args], cwd=cwd, env={**base, "COLUMNS": "200",
        **(env or {})}, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_workspace_is_found_upwards_and_its_absence_is_said(tmp_path: Path) -> None:
    project = tmp_path / "project"
    deep = project / "src" / "deep"
    deep.mkdir(parents=True)
    made = runyard(project, "run", "demo", "x=1", "y=2", "--name", "up", "--json")
    assert made.returncode == 0, made.stderr
    found = runyard(deep, "ls", "--json")
    assert found.returncode == 0, found.stderr
    assert [s["task_id"] for s in json.loads(found.stdout)] == ["base#demo#up"]
    assert not (deep / ".runyard").exists()  # nothing made where the command ran
    # a runyard.yaml further up names the workspace, relative to its own folder
    (project / "runyard.yaml").write_text("workspace_dir: .runyard\nlog_dir: logs\n")
    status = runyard(deep, "status", "base#demo#up", "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["state"] == "succeeded"
    # an explicit workspace wins over the walk, and a missing one is named
    gone = runyard(deep, "ls", "--workspace-dir", str(tmp_path / "nope"))
    assert gone.returncode != 0 and f"no runyard workspace at {tmp_path / 'nope'}" in gone.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    empty = runyard(elsewhere, "ls")
    assert empty.returncode != 0 and empty.stdout == ""
    assert "no runyard workspace here or in any parent folder" in empty.stderr
    assert "runyard serve" in empty.stderr and not (elsewhere / ".runyard").exists()
    by_env = runyard(
        elsewhere, "ls", "--json", env={"RUNYARD_WORKSPACE_DIR": str(project / ".runyard")}
    )
    assert by_env.returncode == 0 and len(json.loads(by_env.stdout)) == 1


def test_version_and_completion(tmp_path: Path) -> None:
    shown = runyard(tmp_path, "--version")
    assert shown.returncode == 0 and shown.stdout.strip() == f"runyard {version('runyard')}"
    # the shell named, not guessed from the processes above the test (which vary by runner)
    named = {"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    script = runyard(tmp_path, "--show-completion", "bash", env=named)
    assert script.returncode == 0 and "_RUNYARD_COMPLETE" in script.stdout
    # completion sees the whole CLI: commands of a group, not only the top level
    words = {"_RUNYARD_COMPLETE": "complete_bash", "COMP_CWORD": "2"}
    agent = runyard(tmp_path, env={**words, "COMP_WORDS": "runyard agent ses"})
    assert "sessions" in agent.stdout.split()
    top = runyard(tmp_path, env={**words, "COMP_WORDS": "runyard l", "COMP_CWORD": "1"})
    assert {"ls", "logs"} <= set(top.stdout.split())


def test_status_and_definition_views_for_people(tmp_path: Path) -> None:
    zone = {"TZ": "Asia/Tokyo"}  # no daylight saving: the zone name is always JST
    made = runyard(tmp_path, "run", "demo", "x=20", "y=22", "--name", "view", "--json", env=zone)
    record = json.loads(made.stdout)
    shown = runyard(tmp_path, "status", "base#demo#view", env=zone)
    assert shown.returncode == 0, shown.stderr
    created = datetime.fromisoformat(record["created_at"].replace("Z", "+00:00"))
    local = created.astimezone(ZoneInfo("Asia/Tokyo")).strftime("%Y-%m-%d %H:%M:%S")
    lines = {line.split()[0]: line.split(None, 1)[1] for line in shown.stdout.splitlines()[:9]}
    assert lines["created"].strip() == f"{local} JST"
    assert "duration" in shown.stdout and "finished" in shown.stdout
    # the result in full, as indented JSON (not a Python dict cut short)
    body = shown.stdout.split("\nresult\n", 1)[1]
    assert json.loads(body) == record["result"] and '  "result": 42' in body
    listed = runyard(tmp_path, "ls", env=zone)
    assert "CREATED (JST)" in listed.stdout and local in listed.stdout
    as_json = runyard(tmp_path, "status", "base#demo#view", "--json", env=zone)
    assert json.loads(as_json.stdout) == record  # --json is the record, unchanged
    definition = runyard(tmp_path, "defs", "demo")
    assert definition.returncode == 0 and "$schema" not in definition.stdout
    rows = {line.split()[0]: line.split() for line in definition.stdout.splitlines() if line}
    assert rows["INPUT"][:5] == ["INPUT", "TYPE", "REQUIRED", "DEFAULT", "DESCRIPTION"]
    assert rows["x"][:3] == ["x", "integer", "yes"] and rows["fail"][:4] == [
        "fail",
        "boolean",
        "no",
        "false",
    ]
    assert rows["task_name"][1:4] == ["string", "|", "null"]
    schema = json.loads(runyard(tmp_path, "defs", "demo", "--json").stdout)
    assert schema["name"] == "demo" and "properties" in schema["input_schema"]


def test_task_text_is_shown_as_text_not_markup(tmp_path: Path) -> None:
    # an error or result may hold anything a task wrote, rich markup and links included
    from rich.console import Console

    from runyard.cli.render import status_summary
    from runyard.workspace.records import TaskStatus

    made = runyard(tmp_path, "run", "demo", "x=1", "y=2", "--name", "markup", "--json")
    record = json.loads(made.stdout)
    tricky = "[link=http://evil.example]click[/link] [bold red]boom[/]"
    status = TaskStatus.model_validate({**record, "error": tricky, "result": {"note": tricky}})
    console = Console(record=True, width=200, color_system=None)
    console.print(status_summary(status))
    text = console.export_text()
    assert text.count(tricky) == 2  # the error row and the result, both verbatim
