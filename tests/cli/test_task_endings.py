"""How the CLI ends on a task that did not succeed (exit 1, the task's code said), what a
typo is told ("did you mean"), and the command task's output tail. Real CLI subprocesses,
a real server, real workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_proc import cli

from runyard.tasks.builtin.outputtail import TAIL_BYTES, TAIL_LINES
from serverproc import ServerProcess, start_server

FAILING = "command=sh -c 'echo first; echo second >&2; exit 3'"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("endings"))
    try:
        yield proc
    finally:
        proc.stop()


def local(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``runyard ARGS`` on the files of ``cwd`` (no server)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    return subprocess.run(
        [sys.executable, "-m", "runyard", *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=90, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_failed_task_waited_for_exits_1_with_its_code_said(srv: ServerProcess) -> None:
    shown = cli(srv, "submit", "command", FAILING, "--name", "fails-shown", "--wait")
    assert shown.returncode == 1, shown.stderr
    assert "failed with exit code 3" in shown.stderr and "base#command#fails-shown" in shown.stderr
    as_json = cli(srv, "submit", "command", FAILING, "--name", "fails-json", "--wait", "--json")
    assert as_json.returncode == 1, as_json.stderr
    status = json.loads(as_json.stdout)  # stdout stays JSON
    assert status["state"] == "failed" and status["exit_code"] == 3
    assert "exit code 3" in as_json.stderr
    waited = cli(srv, "wait", status["task_id"])
    assert waited.returncode == 1 and "failed with exit code 3" in waited.stderr


def test_a_cancelled_task_waited_for_exits_1(srv: ServerProcess) -> None:
    handle = json.loads(cli(srv, "submit", "command", "command=sleep 60", "--json").stdout)
    assert cli(srv, "cancel", handle["task_id"]).returncode == 0
    waited = cli(srv, "wait", handle["task_id"], handle["run_id"])
    assert waited.returncode == 1 and "was cancelled" in waited.stderr, waited.stderr


def test_run_here_exits_1_too(tmp_path: Path) -> None:
    done = local(tmp_path, "run", "command", FAILING, "--json")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["exit_code"] == 3 and "exit code 3" in done.stderr


def test_the_failure_carries_the_commands_last_lines(srv: ServerProcess) -> None:
    done = cli(srv, "submit", "command", FAILING, "--name", "fails-tail", "--wait", "--json")
    error = json.loads(done.stdout)["error"]
    assert error.startswith("TaskExit: Command exited with code 3; its last output:\n"), error
    assert error.endswith("first\nsecond"), error  # stdout and stderr, as the log has them


def test_a_success_carries_at_most_the_last_lines(srv: ServerProcess) -> None:
    lines = "command=sh -c 'for i in $(seq 1 100); do echo line$i; done'"
    done = cli(srv, "submit", "command", lines, "--name", "many-lines", "--wait", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)["result"]
    assert result["exit_code"] == 0
    expected = [f"line{i}" for i in range(101 - TAIL_LINES, 101)]
    assert result["output_tail"].split("\n") == expected


def test_a_long_line_is_bounded_in_bytes(srv: ServerProcess) -> None:
    long_line = "command=sh -c 'head -c 20000 /dev/zero | tr \"\\0\" x; echo; echo done'"
    done = cli(srv, "submit", "command", long_line, "--name", "long-line", "--wait", "--json")
    assert done.returncode == 0, done.stderr
    tail = json.loads(done.stdout)["result"]["output_tail"]
    assert TAIL_BYTES - 8 <= len(tail.encode()) <= TAIL_BYTES, len(tail.encode())
    assert tail.endswith("x\ndone"), tail[-100:]
    assert tail.startswith("…xxx")  # the end of the long line, its front cut


def test_silence_is_an_empty_tail(srv: ServerProcess) -> None:
    done = cli(srv, "submit", "command", "command=sh -c :", "--name", "silent", "--wait", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["result"]["output_tail"] == ""


def test_typos_are_told_the_closest_name(srv: ServerProcess) -> None:
    task = cli(srv, "submit", "dmeo", "x=1", "y=2")
    assert task.returncode == 2 and "Unknown Task: dmeo. Did you mean 'demo'?" in task.stderr
    field = cli(srv, "submit", "demo", "x=1", "yy=2")
    assert field.returncode == 2, field.stderr
    assert "yy: unknown input field; did you mean 'y'?" in field.stderr
    defs = cli(srv, "defs", "dmeo")
    assert defs.returncode != 0 and "Did you mean 'demo'?" in defs.stderr
    far = cli(srv, "submit", "zzzzzz", "qqqq=1")
    assert far.returncode == 2 and "Did you mean" not in far.stderr
    far_field = cli(srv, "submit", "demo", "x=1", "y=2", "qqqq=1")
    assert "qqqq: unknown input field" in far_field.stderr
    assert "did you mean" not in far_field.stderr


def test_typos_here_too(tmp_path: Path) -> None:
    done = local(tmp_path, "run", "comand", "command=sh -c :")
    assert done.returncode == 2 and "Did you mean 'command'?" in done.stderr, done.stderr


def test_bytes_that_are_not_text_stay_within_the_bound(srv: ServerProcess) -> None:
    # each byte that is not UTF-8 reads as U+FFFD, three bytes: the bound still holds
    binary = 'command=sh -c \'head -c 5000 /dev/zero | tr "\\0" "\\377"\''
    done = cli(srv, "submit", "command", binary, "--name", "binary", "--wait", "--json")
    assert done.returncode == 0, done.stderr
    tail = json.loads(done.stdout)["result"]["output_tail"]
    assert TAIL_BYTES - 8 <= len(tail.encode()) <= TAIL_BYTES and "\ufffd" in tail
