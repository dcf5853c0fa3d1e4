"""Ctrl-C, --timeout and a lost server while the CLI waits: real SIGINTs to real CLIs."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from cli_proc import base_env, cli, connected_to, processes_in, start_cli, wait_for

from runyard.faults import DELAY_VAR
from serverproc import ServerProcess, start_server

SLEEPER = "command=sleep 60"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the tests that leave it running (a server start is the slow part)."""
    proc = start_server(tmp_path_factory.mktemp("interrupts"))
    try:
        yield proc
    finally:
        proc.stop()


def _state(status_path: Path) -> str | None:
    try:
        return str(json.loads(status_path.read_text())["state"])
    except (OSError, ValueError):
        return None


def _sleeping(pid: int) -> bool:
    """Whether the process's main thread sleeps (``time.sleep``) at this moment."""
    try:
        return "nanosleep" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


def _waiting_on_a_thread(pid: int) -> bool:
    """Whether the process's main thread waits on a lock or event (a futex) at this moment."""
    try:
        return "futex" in Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False


def _interrupt(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def _interrupted_while_waiting(
    server: ServerProcess, port: int, args: list[str], watched: Path
) -> tuple[int, str]:
    """Start ``runyard ARGS``; once it talks to the server and the task it waits on runs,
    press Ctrl-C; its exit code and stderr."""
    proc = start_cli(server.root, server.cli_env(), *args)
    try:
        wait_for(lambda: connected_to(proc.pid, port), what=f"{args} to reach the server")
        wait_for(lambda: _state(watched) == "running", what=f"{watched.parent.name} to run")
        if "submit" in args:  # the task can run before the CLI has read the submit's answer:
            # wait until its main thread waits on the thread that waits for the task
            wait_for(lambda: _waiting_on_a_thread(proc.pid), what=f"{args} to wait")
        code, _, err = _interrupt(proc)
    finally:
        proc.kill()
    return code, err


def test_ctrl_c_on_a_foreground_run_cancels_the_task(tmp_path: Path) -> None:
    task_dir = tmp_path / ".runyard" / "base" / "base#command#fg"
    proc = start_cli(tmp_path, base_env(), "run", "command", SLEEPER, "--name", "fg")
    try:
        wait_for(lambda: _state(task_dir / "status.json") == "running", what="the run to start")
        wait_for(lambda: len(processes_in(task_dir)) >= 2, what="the worker and its sleep")
        code, _, err = _interrupt(proc)
    finally:
        proc.kill()
    assert code == 130, err
    assert "cancelled base#command#fg" in err and "Traceback" not in err, err
    assert _state(task_dir / "status.json") == "cancelled"
    wait_for(lambda: not processes_in(task_dir), timeout=10, what="the worker to be gone")


def test_ctrl_c_on_waits_and_watch_leaves_the_task_running_and_says_so(
    shared: ServerProcess,
) -> None:
    server = shared
    port = urlsplit(server.url).port
    assert port is not None
    submitted = cli(server, "submit", "command", SLEEPER, "--name", "long", "--json")
    task_id = json.loads(submitted.stdout)["task_id"]
    status_path = server.workspace / "base" / task_id / "status.json"
    wait_for(lambda: _state(status_path) == "running", what="the task to run")
    other = server.workspace / "base" / "base#command#other" / "status.json"
    commands = {
        "submit --wait": (["submit", "command", SLEEPER, "--name", "other", "--wait"], other),
        "wait": (["wait", task_id], status_path),
        "watch": (["watch", task_id], status_path),
    }
    for label, (args, watched) in commands.items():
        code, err = _interrupted_while_waiting(server, port, args, watched)
        shown = watched.parent.name
        assert code == 130, (label, err)
        assert f"still running: runyard cancel {shown}" in err, (label, err)
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, (label, err)
    assert _state(status_path) == "running"
    assert _state(server.workspace / "base" / "base#command#other" / "status.json") == "running"


def test_ctrl_c_as_submit_wait_begins_to_wait_still_says_the_task_runs(
    shared: ServerProcess,
) -> None:
    """The moment between the submit's answer and the waiting thread is covered too: a
    Ctrl-C there used to end the command with 130 and not a word."""
    server = shared
    port = urlsplit(server.url).port
    assert port is not None
    env = {**server.cli_env(), DELAY_VAR: "cli.wait:20"}  # a slow start of the wait
    args = ["submit", "command", SLEEPER, "--name", "slowwait", "--wait"]
    proc = start_cli(server.root, env, *args)
    task_dir = server.workspace / "base" / "base#command#slowwait"
    try:
        wait_for(lambda: connected_to(proc.pid, port), what="submit to reach the server")
        wait_for(lambda: _state(task_dir / "status.json") == "running", what="the task to run")
        # the task can run before the CLI has read the submit's answer: wait until its main
        # thread sleeps in the slow start of the wait
        wait_for(lambda: _sleeping(proc.pid), what="the CLI to reach the start of its wait")
        code, _, err = _interrupt(proc)
    finally:
        proc.kill()
    assert code == 130, err
    assert "still running: runyard cancel base#command#slowwait" in err, err
    assert "Traceback" not in err, err
    assert _state(task_dir / "status.json") == "running"


def test_timeouts_exit_124_and_leave_the_task_running(shared: ServerProcess) -> None:
    server = shared
    waited = cli(server, "submit", "command", SLEEPER, "--name", "slow", "--wait", "--timeout", "1")
    assert waited.returncode == 124, waited.stderr
    assert "timed out after 1s" in waited.stderr
    assert "still running: runyard cancel base#command#slow" in waited.stderr
    again = cli(server, "wait", "base#command#slow", "--timeout", "0.5", "--json")
    assert again.returncode == 124 and again.stdout == "", again.stderr
    assert "still running: runyard cancel base#command#slow" in again.stderr
    assert json.loads(cli(server, "status", "base#command#slow", "--json").stdout)["state"] in (
        "queued",
        "running",
    )
    quick = cli(server, "submit", "demo", "x=1", "y=2", "--wait", "--timeout", "30", "--json")
    assert quick.returncode == 0 and json.loads(quick.stdout)["state"] == "succeeded"


def test_a_server_gone_mid_wait_is_one_plain_sentence(
    server: ServerProcess, tmp_path: Path
) -> None:
    port = urlsplit(server.url).port
    assert port is not None
    task_id = json.loads(cli(server, "submit", "command", SLEEPER, "--json").stdout)["task_id"]
    # not under the server's folder: stopping a test server kills what runs there
    proc = start_cli(tmp_path, server.cli_env(), "wait", task_id)
    try:
        wait_for(lambda: connected_to(proc.pid, port), what="the wait to reach the server")
        server.stop(signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    assert f"Lost the server at {server.url} while waiting; {task_id} may still be running" in err
    assert "Error(" not in err and "Traceback" not in err, err
