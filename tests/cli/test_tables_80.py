"""Tables never cut ids: in an 80-column terminal (a real pseudo-terminal, COLUMNS=80)
``ls``, ``runs``, ``defs``, ``gc --dry-run`` and the agent tables show every id whole, on
one line, and other columns wrap at word boundaries instead."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from runyard.cli import agent_views
from runyard.cli.common import console

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# the longest id the rules allow: a 64-character registered name and a 32-character name
LONG_TASK = "a-registered-task-name-of-sixty-four-characters-the-most-allowed"
LONGEST = f"analysis#{LONG_TASK}#{'n' * 32}"
SESSION = "ses-01a250f424bc-bd729a1c"
RUN = "run-01a250f424bc-bd729a1c0ffee"


def in_terminal(cwd: Path, *args: str) -> tuple[int, list[str]]:
    """``runyard ARGS`` on a pseudo-terminal 80 columns wide: exit code and the lines shown."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    env.update(COLUMNS="80", LINES="50", TERM="xterm")
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "runyard", *args], cwd=cwd, env=env,
        stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
    )  # fmt: skip
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        assert ready, "the command printed nothing for 60 s"
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the command ended and closed its side
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    code = proc.wait(30)
    text = ANSI.sub("", b"".join(chunks).decode())
    return code, [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]


def whole_on_a_line(value: str, lines: list[str]) -> bool:
    return any(re.search(rf"(^|\s){re.escape(value)}(\s|$)", line) for line in lines)


def seed_status(workspace: Path, task_id: str, state: str = "succeeded") -> None:
    """A task as the seed's layout writes one: its folder and status.json."""
    task_type, task, name = task_id.split("#")
    folder = workspace / task_type / task_id
    folder.mkdir(parents=True)
    status = {
        "task_id": task_id, "run_id": "f5caee3a7b3c40849d0fb3bdc0f0cd23", "task_type": task_type,
        "task_name": task, "state": state, "config": {"task_name": name},
        "created_at": "2026-10-02T00:00:00Z", "started_at": "2026-10-02T00:00:01Z",
        "finished_at": "2026-10-02T00:00:03Z", "exit_code": 0, "error": "", "result": {},
        "steps": [], "log_path": "",
    }  # fmt: skip
    (folder / "status.json").write_text(json.dumps(status))


def test_ls_and_runs_show_the_longest_ids_whole(tmp_path: Path) -> None:
    made = subprocess.run(
        [sys.executable, "-m", "runyard", "run", "demo", "x=1", "y=2", "--name", "b" * 32],
        cwd=tmp_path, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")},
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    seed_status(tmp_path / ".runyard", LONGEST)
    code, lines = in_terminal(tmp_path, "ls")
    assert code == 0, lines
    for task_id in (LONGEST, f"base#demo#{'b' * 32}"):
        assert whole_on_a_line(task_id, lines), lines
    row = next(line for line in lines if LONGEST in line)
    assert "succeeded" in row and "2.0s" in row  # the other cells whole on the id's line
    code, lines = in_terminal(tmp_path, "ls", "--wide")  # one line a task, however wide
    assert code == 0 and len([line for line in lines if line]) == 3, lines
    longest = next(line for line in lines if LONGEST in line)
    assert re.search(r"succeeded\s+2026-10-02 \d\d:\d\d:\d\d\s+2\.0s$", longest), lines
    code, lines = in_terminal(tmp_path, "ls", "--type", "base")  # ids that fit: 80 columns
    assert code == 0 and whole_on_a_line(f"base#demo#{'b' * 32}", lines), lines
    assert all(len(line) <= 80 for line in lines), lines
    code, lines = in_terminal(tmp_path, "runs", "b" * 32)
    assert code == 0 and any(re.match(r"^[0-9a-f]{32}  succeeded", line) for line in lines)


def test_defs_wraps_descriptions_at_words_and_keeps_names_whole(tmp_path: Path) -> None:
    (tmp_path / ".runyard").mkdir()
    code, lines = in_terminal(tmp_path, "defs")
    assert code == 0, lines
    shown = {word for line in lines for word in line.split()}
    from runyard.tasks.registry import TaskRegistry

    for definition in TaskRegistry.load().definitions():
        assert whole_on_a_line(definition.name, lines), (definition.name, lines)
        for word in (definition.description or "").split():
            assert word in shown, (word, lines)  # never split inside a word
    assert all(len(line) <= 80 for line in lines), lines


def test_gc_dry_run_lists_ids_whole(tmp_path: Path) -> None:
    """Three finished tasks of the longest ids, one kept per task: two would go, each named
    whole on its own row although an id alone is wider than the terminal."""
    (tmp_path / "runyard.yaml").write_text("retention:\n  keep_last_per_task: 1\n")
    ids = [f"analysis#{LONG_TASK}#{letter * 32}" for letter in "cde"]
    for task_id in ids:
        seed_status(tmp_path / ".runyard", task_id)
    (tmp_path / "logs").mkdir()
    code, lines = in_terminal(tmp_path, "gc", "--dry-run")
    assert code == 0, lines
    removed = [line.split()[-1] for line in lines if line.startswith("would remove task")]
    assert len(removed) == 2 and set(removed) < set(ids), lines
    assert any(line.startswith("would remove 2 items") for line in lines), lines


def _rendered(render: object, page: dict[str, object]) -> list[str]:
    """An agent view's output at 80 columns, as the CLI's console prints it."""
    out = io.StringIO()
    console._console = Console(file=out, width=80, force_terminal=True, color_system=None)  # type: ignore[attr-defined]
    try:
        render(page)  # type: ignore[operator]
    finally:
        console._console = None  # type: ignore[attr-defined]
    return [ANSI.sub("", line).rstrip() for line in out.getvalue().split("\n")]


def test_agent_sessions_runs_and_checkpoints_keep_ids_whole() -> None:
    long_title = "a session about a long and winding research question " * 3
    sessions = {"items": [{"id": SESSION, "title": long_title, "status": "OPEN",
                           "history": [{}] * 3, "latestRunId": RUN}]}  # fmt: skip
    lines = _rendered(agent_views.sessions_table, sessions)
    assert whole_on_a_line(SESSION, lines) and whole_on_a_line(RUN, lines), lines
    assert {"winding", "research", "question"} <= {w for line in lines for w in line.split()}
    wide = _rendered(lambda page: agent_views.sessions_table(page, wide=True), sessions)
    assert any(long_title.strip() in line for line in wide), wide  # --wide: one line
    runs = {"items": [{"id": RUN, "state": "failed", "package": "a-package-with-a-long-name",
                       "isolation": "bwrap", "exitCode": 3,
                       "error": "the agent exited with status 3 after a long explanation"}]}  # fmt: skip
    lines = _rendered(agent_views.runs_table, runs)
    assert whole_on_a_line(RUN, lines), lines
    checkpoints = {"items": [{"runId": RUN, "createdAt": "2026-12-07T19:26:20.123456Z",
                              "files": 12, "bytes": 123456789, "skipped": ["x"]}] * 2}  # fmt: skip
    lines = _rendered(agent_views.checkpoints_table, checkpoints)
    assert sum(whole_on_a_line(RUN, [line]) for line in lines) == 2, lines
    assert whole_on_a_line("2026-12-07T19:26:20.123456Z", lines)
