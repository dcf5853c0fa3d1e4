"""Waiting on an agent run from the terminal is like waiting on a task: ``--timeout`` exits
124 and Ctrl-C exits 130, both saying the run goes on and how to cancel it, and a server
that cannot be reached is one plain sentence. Real CLI processes, real server, real runs."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_proc import CLI, as_from_a_terminal, connected_to, wait_for

from serverproc import ServerProcess, start_server

PACKAGES = Path(__file__).parents[1] / "agents" / "packages"  # the probe package
HOLD = "wait-for go\nanswer done"  # the probe waits for <session-state>/go, then answers


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    config = {"agent_sandbox": "none", "agent_packages_dir": str(PACKAGES)}
    srv = start_server(tmp_path_factory.mktemp("waits"), config=config)
    try:
        yield srv
    finally:
        srv.stop()


def agent(srv: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "agent", *args], cwd=srv.root, env=srv.cli_env(), capture_output=True,
        text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def run_state(srv: ServerProcess, run_id: str) -> str:
    done = agent(srv, "run-info", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["state"])


def held_run(srv: ServerProcess) -> tuple[str, str]:
    session = json.loads(agent(srv, "create-session", "--json").stdout)["id"]
    started = agent(srv, "run", "--session", session, HOLD, "--package", "probe", "--json")
    assert started.returncode == 0, started.stderr
    return session, json.loads(started.stdout)["id"]


def test_run_wait_timeout_exits_124_and_the_run_goes_on(server: ServerProcess) -> None:
    session = json.loads(agent(server, "create-session", "--json").stdout)["id"]
    done = agent(server, "run", "--session", session, HOLD, "--package", "probe",
                 "--wait", "--timeout", "1")  # fmt: skip
    assert done.returncode == 124, done.stderr
    assert "timed out after 1s" in done.stderr
    assert "still running: runyard agent cancel run-" in done.stderr
    run_id = done.stderr.split("runyard agent cancel ")[1].split()[0]
    assert run_state(server, run_id) in ("queued", "running")
    (server.workspace / "agent" / "session-state" / session / "go").touch()
    follow = agent(server, "events", run_id, "--timeout", "60")
    assert follow.returncode == 0 and follow.stdout.split()[-1] == "succeeded", follow.stderr


def test_ctrl_c_on_a_wait_exits_130_and_says_how_to_cancel(server: ServerProcess) -> None:
    _, run_id = held_run(server)
    port = int(server.url.rsplit(":", 1)[1].rstrip("/"))
    waiting = subprocess.Popen(
        [*CLI, "agent", "events", run_id], cwd=server.root, env=server.cli_env(), text=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=as_from_a_terminal,
    )  # fmt: skip
    try:
        # the wait is past its start once it holds the event stream
        wait_for(lambda: connected_to(waiting.pid, port) or waiting.poll() is not None)
        waiting.send_signal(signal.SIGINT)
        _, err = waiting.communicate(timeout=30)
    finally:
        waiting.kill()
    assert waiting.returncode == 130, err
    assert f"still running: runyard agent cancel {run_id}" in err and "Traceback" not in err
    assert run_state(server, run_id) == "running"
    assert agent(server, "cancel", run_id).returncode == 0


def test_an_unreachable_server_is_one_plain_sentence(server: ServerProcess) -> None:
    with socket.socket() as sock:  # bound and closed: a connect there is refused
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    done = agent(server, "sessions", "--url", url)
    assert done.returncode != 0 and done.stdout == ""
    assert f"cannot reach the server at {url}: connection refused" in done.stderr
    for internal in ("Error", "Errno", "httpx", "Traceback"):
        assert internal not in done.stderr, done.stderr
