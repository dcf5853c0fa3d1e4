"""``runyard run --detach`` beside the workspace's running server: the server runs it, under
its ``max_concurrent_tasks``, never beside its queue. A real server on 127.0.0.1 and the
real CLI, finding the server only through the workspace's ``server.json``."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from cli_proc import CLI, base_env

from serverproc import ServerProcess, kill_strays, start_server

CAP = 2
RUNS = 5
FINAL = {"succeeded", "failed", "cancelled"}


def detach(server: ServerProcess, line: str) -> dict[str, str]:
    done = subprocess.run(
        [*CLI, "run", "command", f"command={json.dumps(line)}", "shell=true", 'artifacts=""',
         "--detach", "--json",
         "--workspace-dir", str(server.workspace), "--log-dir", str(server.log_dir)],
        cwd=server.root, env=base_env(), capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    handle: dict[str, str] = json.loads(done.stdout)
    return handle


def states(server: ServerProcess, handles: list[dict[str, str]]) -> list[str]:
    return [server.call("status", task_id=h["task_id"])["answer"]["state"] for h in handles]


def most_at_once(marks: list[str]) -> int:
    """The most runs between their ``start`` and ``end`` marks at any one time."""
    events = []
    for mark in marks:
        kind, when, _run_id = mark.split()
        events.append((float(when), 1 if kind == "start" else -1))
    running = most = 0
    for _, step in sorted(events, key=lambda event: (event[0], event[1])):
        running += step
        most = max(most, running)
    return most


def test_detached_runs_beside_a_server_hold_to_its_task_cap(tmp_path: Path) -> None:
    flag, marks = tmp_path / "go", tmp_path / "marks"
    line = (f'echo "start $(date +%s.%N) $RUNYARD_RUN_ID" >> {marks}; '
            f"while [ ! -e {flag} ]; do sleep 0.05; done; "
            f'echo "end $(date +%s.%N) $RUNYARD_RUN_ID" >> {marks}')  # fmt: skip
    server = start_server(tmp_path / "srv", config={"max_concurrent_tasks": CAP})
    try:
        handles = [detach(server, line) for _ in range(RUNS)]
        deadline = time.monotonic() + 30
        while states(server, handles).count("running") < CAP:
            assert time.monotonic() < deadline, states(server, handles)
            time.sleep(0.05)
        for _ in range(20):  # a second and more: the others stay queued behind the cap
            now = states(server, handles)
            assert now.count("running") == CAP and now.count("queued") == RUNS - CAP, now
            time.sleep(0.05)
        flag.touch()
        deadline = time.monotonic() + 60
        while not set(states(server, handles)) <= FINAL:
            assert time.monotonic() < deadline, states(server, handles)
            time.sleep(0.1)
        assert states(server, handles) == ["succeeded"] * RUNS
        recorded = marks.read_text().splitlines()
        assert len(recorded) == 2 * RUNS and most_at_once(recorded) <= CAP
    finally:
        flag.touch()
        server.stop()
        kill_strays(tmp_path)


def test_with_no_server_answering_a_detached_run_runs_here(tmp_path: Path) -> None:
    """A server.json whose pid lives on (reused) and whose address answers nobody: the
    CLI launches the run itself."""
    server = start_server(tmp_path / "srv")
    server.stop()
    record = {"url": server.url, "token": server.token, "pid": 1}
    (server.workspace / "server.json").write_text(json.dumps(record))
    try:
        handle = detach(server, "echo here")
        deadline = time.monotonic() + 30
        status = server.workspace / "base" / handle["task_id"] / "status.json"
        while json.loads(status.read_text())["state"] not in FINAL:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert json.loads(status.read_text())["state"] == "succeeded"
    finally:
        kill_strays(tmp_path)
