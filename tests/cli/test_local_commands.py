"""The CLI without a server: it runs workers itself and reads the workspace files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


def runyard(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    return subprocess.run(
        [sys.executable, "-m", "runyard", *args], cwd=cwd, env={**base, **(env or {})},
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_run_demo_prints_final_status(tmp_path: Path) -> None:
    done = runyard(tmp_path, "run", "demo", "x=1", "y=2", "--name", "api-demo", "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["task_id"] == "base#demo#api-demo" and status["state"] == "succeeded"
    assert status["config"]["x"] == 1 and status["result"]["result"] == 3
    assert (tmp_path / ".runyard" / "base" / "base#demo#api-demo" / "metadata.json").is_file()
    assert Path(status["log_path"]).is_relative_to(tmp_path / "logs")
    logs = runyard(tmp_path, "logs", "base#demo#api-demo", "--offset", "0", "--limit", "4096")
    assert "Demo result=3" in logs.stdout
    window = json.loads(runyard(tmp_path, "logs", "base#demo#api-demo", "--json").stdout)
    assert window["next_offset"] == window["file_size"]


def test_failing_demo_exits_nonzero(tmp_path: Path) -> None:
    done = runyard(tmp_path, "run", "demo", "x=1", "y=2", "fail=true", "--json")
    assert done.returncode != 0
    status = json.loads(done.stdout)
    assert status["state"] == "failed" and "fail" in status["error"]


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    unknown = runyard(tmp_path, "run", "nope", "x=1")
    assert unknown.returncode != 0 and "Unknown Task: nope" in unknown.stderr
    extra = runyard(tmp_path, "run", "demo", "x=1", "y=2", "z=3")
    assert extra.returncode != 0 and "z" in extra.stderr
    bad = runyard(tmp_path, "run", "demo", "x=1", "y=2", "--name", "no/slash")
    assert bad.returncode != 0 and "task_name" in bad.stderr
    assert "Traceback" not in unknown.stderr + extra.stderr + bad.stderr
    (tmp_path / ".runyard").mkdir(exist_ok=True)  # refused runs made none; ask one that exists
    status = runyard(tmp_path, "status", "base#demo#absent")
    assert status.returncode != 0 and "absent" in status.stderr


def test_command_task_and_detach(tmp_path: Path) -> None:
    done = runyard(
        tmp_path, "run", "command", "command=python3 -c 'print(42)'", "--name", "c1", "--json"
    )
    assert done.returncode == 0, done.stderr
    assert "42" in runyard(tmp_path, "logs", "base#command#c1").stdout
    started = time.monotonic()
    detached = runyard(
        tmp_path, "run", "command", "command=sleep 600", "--name", "long", "--detach"
    )
    assert detached.returncode == 0 and time.monotonic() - started < 20
    status = json.loads(runyard(tmp_path, "status", "base#command#long", "--json").stdout)
    assert status["state"] in ("queued", "running")
    cancelled = runyard(tmp_path, "cancel", "base#command#long", "--json")
    assert cancelled.stdout.strip() == "true"
    final = json.loads(runyard(tmp_path, "status", "base#command#long", "--json").stdout)
    assert final["state"] == "cancelled" and final["exit_code"] == 130


def test_ls_newest_first_and_source_lineage(tmp_path: Path) -> None:
    for name in ("one", "two"):
        assert runyard(tmp_path, "run", "demo", "x=1", "y=1", "--name", name).returncode == 0
    child = runyard(
        tmp_path,
        "run",
        "demo",
        "x=1",
        "y=1",
        "--name",
        "three",
        "--source",
        "base#demo#one,base#demo#two",
    )
    assert child.returncode == 0, child.stderr
    listed = json.loads(runyard(tmp_path, "ls", "--json").stdout)
    assert [s["task_id"] for s in listed] == ["base#demo#three", "base#demo#two", "base#demo#one"]
    graph = json.loads(runyard(tmp_path, "graph", "base#demo#three", "--json").stdout)
    assert {e["from"] for e in graph["edges"]} == {"base#demo#one", "base#demo#two"}
    tree = runyard(tmp_path, "graph", "base#demo#one")
    assert "base#demo#three" in tree.stdout
    removed = json.loads(runyard(tmp_path, "rm", "base#demo#one", "--json").stdout)
    assert removed == ["base#demo#one"]
    graph = json.loads(runyard(tmp_path, "graph", "base#demo#three", "--json").stdout)
    assert any(n["missing"] for n in graph["nodes"] if n["task_id"] == "base#demo#one")


@pytest.mark.parametrize("how", ["env", "dotenv", "option", "config"])
def test_workspace_dir_sources(tmp_path: Path, how: str) -> None:
    target = tmp_path / f"ws-{how}"
    args = ["run", "demo", "x=1", "y=2", "--name", "where"]
    env: dict[str, str] = {}
    if how == "env":
        env["RUNYARD_WORKSPACE_DIR"] = str(target)
    elif how == "dotenv":
        (tmp_path / ".env").write_text(f"RUNYARD_WORKSPACE_DIR={target}\n")
    elif how == "option":
        env["RUNYARD_WORKSPACE_DIR"] = str(tmp_path / "not-this-one")
        args += ["--workspace-dir", str(target)]
    else:
        (tmp_path / "runyard.yaml").write_text(f"workspace_dir: {target}\n")
        env["RUNYARD_WORKSPACE_DIR"] = str(tmp_path / "not-this-one")
    done = runyard(tmp_path, *args, env=env)
    assert done.returncode == 0, done.stderr
    assert (target / "base" / "base#demo#where" / "status.json").is_file()
    assert not (tmp_path / "not-this-one").exists()


def test_logs_follow_until_the_task_ends(tmp_path: Path) -> None:
    script = "command=for i in 1 2 3 4; do echo tick-$i; sleep 0.3; done"
    started = runyard(tmp_path, "run", "command", script, "shell=true", "--name", "ticks", "--detach")
    assert started.returncode == 0, started.stderr
    followed = runyard(tmp_path, "logs", "base#command#ticks", "--offset", "0", "-f", timeout=60)
    assert followed.returncode == 0, followed.stderr
    assert [line for line in followed.stdout.splitlines() if line.startswith("tick-")] == [
        "tick-1", "tick-2", "tick-3", "tick-4",
    ]  # fmt: skip
