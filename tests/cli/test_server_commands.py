"""The CLI against a running server: submit, wait, watch, graph, context, cancel, rm, defs."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from serverproc import ServerProcess, start_server


def cli(srv: ServerProcess, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runyard", *args], cwd=srv.root, env=srv.cli_env(),
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the module: each test submits tasks of its own."""
    proc = start_server(tmp_path_factory.mktemp("commands") / "srv")
    try:
        yield proc
    finally:
        proc.stop()


def succeeded_ids(srv: ServerProcess) -> list[str]:
    listed = json.loads(cli(srv, "ls", "--json", "--state", "succeeded").stdout)
    return [s["task_id"] for s in listed]


def test_submit_wait_watch_and_friends(server: ServerProcess, tmp_path: Path) -> None:
    before = succeeded_ids(server)
    done = cli(server, "submit", "demo", "x=1", "y=2", "--name", "api-demo", "--wait", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["result"] == 3
    watched = cli(server, "watch", "base#demo#api-demo", "--json")
    assert watched.returncode == 0, watched.stderr
    assert json.loads(watched.stdout[watched.stdout.index("{") :])["state"] == "succeeded"
    handle = json.loads(
        cli(
            server,
            "submit",
            "demo",
            "x=1",
            "y=2",
            "--name",
            "child",
            "--source",
            "base#demo#api-demo",
            "--json",
        ).stdout
    )
    waited = cli(server, "wait", handle["task_id"], handle["run_id"], "--json")
    assert json.loads(waited.stdout)["state"] == "succeeded"
    context = json.loads(cli(server, "context", "base#demo#child").stdout)
    assert context["relations"]["direct_upstream"] == ["base#demo#api-demo"]
    tree = cli(server, "graph", "base#demo#api-demo")
    assert "base#demo#child" in tree.stdout
    defs = json.loads(cli(server, "defs", "--json").stdout)
    assert {"demo", "command"} <= {d["name"] for d in defs["definitions"]}
    assert defs["plugin_errors"] == {} and defs["restart_required"] == {}
    assert succeeded_ids(server) == ["base#demo#child", "base#demo#api-demo", *before]
    long = json.loads(
        cli(server, "submit", "command", "command=sleep 60", "--name", "long", "--json").stdout
    )
    assert cli(server, "cancel", long["task_id"], "--json").stdout.strip() == "true"
    failed_watch = cli(server, "watch", long["task_id"])
    assert failed_watch.returncode == 130
    removed = cli(server, "rm", "base#demo#child", "base#demo#nope")
    assert removed.returncode == 1 and "deleted base#demo#child" in removed.stdout
    assert "Task base#demo#nope does not exist" in removed.stderr, removed.stderr


def test_cli_finds_the_server_from_the_workspace(server: ServerProcess) -> None:
    env = {k: v for k, v in server.cli_env().items() if k != "RUNYARD_URL"}
    info = json.loads((server.workspace / "server.json").read_text())
    assert info["url"] == server.url
    done = subprocess.run(
        [sys.executable, "-m", "runyard", "submit", "demo", "x=2", "y=2", "--wait", "--json",
         "--workspace-dir", str(server.workspace)],
        cwd=server.root, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["result"] == 4
