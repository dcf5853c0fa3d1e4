"""What the CLI answers: plain error sentences, exit codes, cancel/rm reasons, ls pages,
``logs -n``/``-f`` and ``watch``/``status`` output. Real CLI subprocesses, real server."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_proc import base_env, cli, start_cli, wait_for

from runyard.runtime.creation import create_task
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace
from serverproc import ServerProcess, start_server

INTERNALS = re.compile(r"\w+Error\b|\w+Exception\b|failed:|Traceback|read_task_log|get_task_")
TALKER = "command=sh -c 'for i in 1 2 3 4 5; do echo line$i; sleep 0.2; done; printf end'"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("answers"))
    try:
        yield proc
    finally:
        proc.stop()


def _state(srv: ServerProcess, task_id: str) -> str | None:
    """The recorded state, read from the file (a CLI call per poll would be slow)."""
    try:
        path = srv.workspace / task_id.split("#")[0] / task_id / "status.json"
        return str(json.loads(path.read_text())["state"])
    except (OSError, ValueError):
        return None


def test_bad_inputs_are_one_plain_sentence_with_an_exit_code(shared: ServerProcess) -> None:
    unknown = cli(shared, "submit", "nope")
    assert unknown.returncode == 2 and "Unknown Task: nope." in unknown.stderr
    bad_field = cli(shared, "submit", "demo", "x=abc", "y=2")
    assert bad_field.returncode == 2 and "Invalid input for task demo: x:" in bad_field.stderr
    bad_id = cli(shared, "status", "gar.bage")  # "garbage" alone is a task name
    assert bad_id.returncode == 2 and "Invalid task id 'gar.bage'" in bad_id.stderr
    answers = [unknown, bad_field, bad_id]
    for command in ("status", "logs", "graph", "cancel", "rm"):
        missing = cli(shared, command, "base#demo#missing")
        assert missing.returncode == 1, (command, missing.stderr)
        assert missing.stderr == "error: Task base#demo#missing does not exist\n", command
        answers.append(missing)
    for answer in answers:
        assert len(answer.stderr.strip().splitlines()) == 1, answer.stderr
        assert not INTERNALS.search(answer.stderr), answer.stderr


def test_cancel_and_rm_say_why_and_exit_non_zero_when_refused(shared: ServerProcess) -> None:
    handle = json.loads(
        cli(shared, "submit", "command", "command=sleep 60", "--name", "busy", "--json").stdout
    )
    task_id = handle["task_id"]
    wait_for(lambda: _state(shared, task_id) == "running", what="the task to run")
    shown = cli(shared, "status", task_id).stdout
    assert re.search(r"^\s*exit_code\s+-\s*$", shown, re.M), shown
    refused = cli(shared, "rm", task_id)
    assert refused.returncode == 1 and refused.stdout == ""
    assert f"{task_id} is running; cancel it first" in refused.stderr
    assert _state(shared, task_id) == "running"
    cancelled = cli(shared, "cancel", task_id)
    assert cancelled.returncode == 0 and cancelled.stdout.strip() == f"cancelled {task_id}"
    wait_for(lambda: _state(shared, task_id) == "cancelled", what="the cancel to land")
    again = cli(shared, "cancel", task_id)
    assert again.returncode == 0, again.stderr
    assert f"{task_id} already finished (cancelled); nothing to cancel" in again.stdout
    assert "already finished" in cli(shared, "cancel", "--help").stdout
    removed = cli(shared, "rm", task_id)
    assert removed.returncode == 0 and removed.stdout.strip() == f"deleted {task_id}"


def test_logs_follow_and_last_lines_and_watch_output(shared: ServerProcess) -> None:
    task_id = json.loads(cli(shared, "submit", "command", TALKER, "--json").stdout)["task_id"]
    follower = start_cli(shared.root, shared.cli_env(), "logs", task_id, "-f")
    out, err = follower.communicate(timeout=60)
    assert follower.returncode == 0, err
    assert out.endswith("line1\nline2\nline3\nline4\nline5\nend"), out
    assert _state(shared, task_id) == "succeeded"
    assert cli(shared, "logs", task_id, "-n", "2").stdout == "line5\nend"
    assert cli(shared, "logs", task_id, "--lines", "0").stdout == ""
    watched = cli(shared, "watch", task_id)
    assert watched.returncode == 0, watched.stderr
    lines = watched.stdout.splitlines()
    assert "end" in [line.strip() for line in lines], watched.stdout  # not glued to the table
    assert any(line.split()[:2] == ["task_id", task_id] for line in lines), watched.stdout


def test_logs_n_reads_back_across_windows(shared: ServerProcess) -> None:
    done = cli(shared, "submit", "command", "command=seq 1 100000", "--wait", "--json")
    task_id = json.loads(done.stdout)["task_id"]
    assert cli(shared, "logs", task_id, "-n", "3").stdout == "99998\n99999\n100000\n"
    many = cli(shared, "logs", task_id, "-n", "60000").stdout.splitlines()
    assert len(many) == 60000 and many[0] == "40001" and many[-1] == "100000"


def test_ls_pages_fifty_at_a_time(tmp_path: Path) -> None:
    workspace = Workspace.open(tmp_path / "ws", tmp_path / "logs")
    registry = TaskRegistry.load()
    for n in range(52):
        create_task(workspace, registry, "demo", {"x": n, "y": 0, "task_name": f"t{n:02d}"})
    where = ["--workspace-dir", str(tmp_path / "ws"), "--log-dir", str(tmp_path / "logs")]

    def ls(*args: str) -> tuple[list[str], str, str]:
        done = start_cli(tmp_path, base_env(), "ls", *where, *args)
        out, err = done.communicate(timeout=60)
        assert done.returncode == 0, err
        rows = [line.split()[0] for line in out.splitlines() if line.startswith("base#")]
        return rows, out, err

    first, out, _ = ls()
    assert len(first) == 50 and len(set(first)) == 50
    footer = f"showing 50 of 52 — use --limit/--cursor or --all (next page: --cursor '{first[-1]}')"
    assert footer in out, out
    rest, out, _ = ls("--cursor", first[-1])
    assert len(rest) == 2 and not set(rest) & set(first) and "showing" not in out
    every, out, _ = ls("--all")
    assert every == first + rest and "showing" not in out
    done = start_cli(tmp_path, base_env(), "ls", *where, "--json", "--limit", "5")
    out, err = done.communicate(timeout=60)
    assert [s["task_id"] for s in json.loads(out)] == first[:5]
    assert "showing 5 of 52" in err


def test_ls_over_http_asks_the_server_for_one_page(tmp_path: Path) -> None:
    # a page is cut by the server: one request for that page, never the whole list
    workspace = Workspace.open(tmp_path / "ws", tmp_path / "logs")
    registry = TaskRegistry.load()
    for n in range(12):
        create_task(workspace, registry, "demo", {"x": n, "y": 0, "task_name": f"h{n:02d}"})
    srv = start_server(tmp_path / "srv", workspace=tmp_path / "ws")
    try:

        def ls(*args: str) -> tuple[list[str], str]:
            done = start_cli(tmp_path, srv.cli_env(), "ls", "--json", *args)
            out, err = done.communicate(timeout=60)
            assert done.returncode == 0, err
            return [s["task_id"] for s in json.loads(out)], err

        first, err = ls("--limit", "3")
        assert len(first) == 3 and "showing 3 of 12" in err and first[-1] in err
        rest, err = ls("--limit", "20", "--cursor", first[-1])
        assert len(rest) == 9 and not set(rest) & set(first) and err == ""
        every, _ = ls("--all", "--type", "base")
        assert every == first + rest
        access = (srv.log_dir / "server.log").read_text()
        asked = re.findall(r'"GET (/api/v1/tasks\S*)', access)
        assert len(asked) == 3 and "limit=3" in asked[0] and "cursor=" not in asked[0]
        assert "limit=20" in asked[1] and "cursor=" in asked[1] and "limit=1000" in asked[2]
        assert "list_task_statuses" not in access  # the unpaged job is never asked
    finally:
        srv.stop()
