"""``runyard agent ...`` against a real server, every command with --json."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api_helpers import agent_server
from click.testing import Result
from typer.testing import CliRunner

from runyard.cli.main import app
from serverproc import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("cli")
    (root / "shared").mkdir()
    srv = agent_server(root / "srv", "none", allowed_mount_roots=[str(root / "shared")])
    try:
        yield srv
    finally:
        srv.stop()


def agent(srv: ServerProcess, *args: str, ok: bool = True) -> Result:
    """Run ``runyard agent ...`` in this process (a fresh interpreter per command is slow)."""
    env = {"RUNYARD_URL": srv.url, "RUNYARD_TOKEN": srv.token or ""}
    done = CliRunner().invoke(app, ["agent", *args], env=env, catch_exceptions=False)
    assert (done.exit_code == 0) is ok, done.stdout + done.stderr
    return done


def test_the_command_line_entry_point(server: ServerProcess) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "runyard", "agent", "sessions", "--json"], cwd=server.root,
        env=server.cli_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["nextCursor"] is None


def as_json(srv: ServerProcess, *args: str) -> Any:
    return json.loads(agent(srv, *args, "--json").stdout)


def test_the_whole_flow_through_the_cli(server: ServerProcess, tmp_path: Path) -> None:
    session = as_json(server, "create-session", "--title", "cli")
    sid = session["id"]
    data = tmp_path / "prices.csv"
    data.write_text("a,b\n1,2\n")
    artifact = as_json(server, "upload", str(data), "--session", sid, "--path", "data/prices.csv")
    assert artifact["relativePath"] == "data/prices.csv" and artifact["size"] == 8
    assert [a["id"] for a in as_json(server, "artifacts", "--session", sid)["items"]] == [
        artifact["id"]
    ]
    agent(server, "download", artifact["id"], "-o", str(tmp_path / "back.csv"))
    assert (tmp_path / "back.csv").read_text() == "a,b\n1,2\n"
    shared = str(server.root.parent / "shared")
    grant = as_json(server, "grant", "--session", sid, "--name", "shared", "--host-path", shared)
    assert grant["access"] == "ro"
    assert as_json(server, "grants", "--session", sid)["items"][0]["name"] == "shared"
    assert as_json(server, "revoke", grant["id"])["revoked"] is True
    script = "read in/data/prices.csv\nanswer the cli answer"
    run = as_json(server, "run", "--session", sid, script, "--package", "probe", "--wait")
    assert run["state"] == "succeeded"
    assert as_json(server, "run-info", run["id"])["id"] == run["id"]
    files = {f["path"] for f in as_json(server, "files", run["id"])["items"]}
    assert "final-answer.md" in files
    assert agent(server, "fetch", run["id"], "final-answer.md").stdout == "the cli answer"
    events = [
        json.loads(line)
        for line in agent(server, "events", run["id"], "--json").stdout.splitlines()
    ]
    assert [e["data"]["state"] for e in events if e["event"] == "state"][-1] == "succeeded"
    shown = as_json(server, "session", sid)
    assert [t["content"] for t in shown["history"]][-1] == "the cli answer"
    assert sid in {s["id"] for s in as_json(server, "sessions")["items"]}
    assert "probe" in {p["name"] for p in as_json(server, "packages")["items"]}
    human = agent(server, "session", sid).stdout
    assert "the cli answer" in human


def test_runs_watch_follows_until_idle(server: ServerProcess) -> None:
    sid = as_json(server, "create-session")["id"]
    script = "wait-for go\nanswer one"
    first = as_json(server, "run", "--session", sid, script, "--package", "probe")
    queued = as_json(
        server, "run", "--session", sid, "answer two", "--package", "probe", "--enqueue"
    )
    assert queued["state"] == "queued"
    watcher = subprocess.Popen(
        [sys.executable, "-m", "runyard", "agent", "runs", "--session", sid, "--watch", "--json"],
        cwd=server.root, env=server.cli_env(), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert watcher.stdout is not None
    decoder = json.JSONDecoder()
    watched = ""
    while True:  # the first page is printed before anything may change
        line = watcher.stdout.readline()
        assert line, "the watch ended before printing its first page"
        watched += line
        try:
            page, end = decoder.raw_decode(watched)
            break
        except ValueError:
            continue
    (server.workspace / "agent" / "session-state" / sid / "go").touch()
    rest, _ = watcher.communicate(timeout=60)
    assert watcher.returncode == 0
    watched += rest
    changes = [json.loads(line) for line in watched[end:].split("\n") if line.strip()]
    assert {r["id"] for r in page["items"]} == {first["id"], queued["id"]}
    assert changes and changes[-1]["id"] == queued["id"] and changes[-1]["state"] == "succeeded"
    table = agent(server, "runs", "--session", sid).stdout
    assert first["id"][:10] in table


def test_cancel_close_reopen_and_errors(server: ServerProcess) -> None:
    sid = as_json(server, "create-session")["id"]
    run = as_json(server, "run", "--session", sid, "sleep 30", "--package", "probe")
    assert as_json(server, "cancel", run["id"])["state"] == "cancelled"
    assert as_json(server, "close", sid)["status"] == "CLOSED"
    refused = agent(server, "run", "--session", sid, "x", ok=False)
    assert "closed" in refused.stderr and "409" in refused.stderr
    assert as_json(server, "reopen", sid)["status"] == "OPEN"
    unknown = agent(server, "run", "--session", sid, "x", "--package", "nope", ok=False)
    assert "No agent package 'nope'" in unknown.stderr
    missing = agent(server, "session", "ses-missing", ok=False)
    assert "404" in missing.stderr
