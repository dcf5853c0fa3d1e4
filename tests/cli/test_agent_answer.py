"""``runyard agent run --wait`` ends with the run's answer; ``--json`` gives the record."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from runyard.cli.main import app
from serverproc import ServerProcess, start_server

PACKAGES = Path(__file__).parents[1] / "agents" / "packages"  # the probe package


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    config = {"agent_sandbox": "bwrap", "agent_packages_dir": str(PACKAGES)}
    srv = start_server(tmp_path_factory.mktemp("answer"), config=config)
    try:
        yield srv
    finally:
        srv.stop()


def agent(srv: ServerProcess, *args: str, code: int = 0) -> Result:
    env = {"RUNYARD_URL": srv.url, "RUNYARD_TOKEN": srv.token or ""}
    done = CliRunner().invoke(app, ["agent", *args], env=env, catch_exceptions=False)
    assert done.exit_code == code, done.stdout + done.stderr
    return done


def test_run_wait_prints_the_answer_of_a_sandboxed_reference_run(server: ServerProcess) -> None:
    session = agent(server, "create-session", "--title", "answers").stdout.strip()
    # through the installed entry point, as a user types it
    done = subprocess.run(
        [sys.executable, "-m", "runyard", "agent", "run", "--session", session,
         "what is [bold]1+1[/bold]?", "--wait"],
        env=server.cli_env(), capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    head, _, answer = done.stdout.partition("\n\n# Answer to: ")
    run_id, state = head.splitlines()[-1].split()
    assert state == "succeeded" and run_id.startswith("run-")
    # the Markdown comes out as written: no rich markup eaten, nothing after it
    assert answer.startswith("what is [bold]1+1[/bold]?\n"), done.stdout
    assert "isolation bwrap" in answer and "ended succeeded with result" in answer
    fetched = agent(server, "fetch", run_id, "final-answer.md").stdout
    assert done.stdout.endswith(fetched.rstrip("\n") + "\n")
    assert agent(server, "answer", run_id).stdout == fetched.rstrip("\n") + "\n"


def test_run_wait_json_is_the_full_record_with_the_answer(server: ServerProcess) -> None:
    session = agent(server, "create-session").stdout.strip()
    done = agent(server, "run", "--session", session, "second", "--wait", "--json")
    record = json.loads(done.stdout)  # nothing but the record on stdout
    assert record["state"] == "succeeded" and record["sessionId"] == session
    assert record["isolation"] == "bwrap" and record["exitCode"] == 0
    assert record["answer"].startswith("# Answer to: second\n")
    shown = json.loads(agent(server, "run-info", record["id"], "--json").stdout)
    assert {k: v for k, v in record.items() if k != "answer"} == shown


def test_a_run_that_wrote_no_answer_fails_and_has_none(server: ServerProcess) -> None:
    session = agent(server, "create-session").stdout.strip()
    done = agent(server, "run", "--session", session, "exit 0", "--package", "probe", "--wait",
                 code=1)  # fmt: skip
    run_id, state = done.stdout.splitlines()[-1].split()
    assert state == "failed"
    missing = agent(server, "answer", run_id, code=1)
    assert missing.stdout == "\n" and "has no answer yet" in missing.stderr
