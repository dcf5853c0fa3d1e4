"""Private by default: another local user reads nothing of a workspace, its logs or its
agent store; an older, open workspace is closed when the server starts; ``workspace_mode:
group`` opens it to the workspace's group and to no one else.

The tests run as root, whom permissions do not stop: every read of "another user" is made
by a process dropped to ``nobody`` (uid and gid 65534, no other groups) with setpriv. Each
test first shows that this user can read what is open to it (a control file beside the
workspace), so a refusal means the workspace's modes, not a broken probe.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runyard.executors.sandbox import find_bwrap, probe_bwrap
from serverproc import ServerProcess, start_server

NOBODY = 65534
TEAM_GID = 4242  # a group only the workspace and the test's reader belong to
RUN_ID = 1000  # uid and gid agent runs execute as, where a test says so
SYSTEM_PYTHON = "/usr/bin/python3"  # one another user may execute (the venv may not be)
PACKAGES = Path(__file__).parent.parent / "agents" / "packages"
TASK_SECRET = "task-secret-7f3a"
PROMPT_SECRET = "prompt-secret-91c2"
PROBE = """
import json, os, sys
answers = []
for op, path in json.loads(sys.argv[1]):
    try:
        if op == "read":
            with open(path, "rb") as f:
                f.read(1)
        else:
            os.listdir(path)
        answers.append("ok")
    except OSError as exc:
        answers.append(type(exc).__name__)
print(json.dumps(answers))
"""
pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="reading as another user needs root"),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)"),
    pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason="needs /usr/bin/python3"),
]


def as_nobody(ops: list[tuple[str, Path]], groups: tuple[int, ...] = ()) -> list[str]:
    """What ``nobody`` (in ``groups``, else in none) gets for each ("read"|"list", path)."""
    ids = ["--groups=" + ",".join(map(str, groups))] if groups else ["--clear-groups"]
    argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", *ids, SYSTEM_PYTHON, "-c",
            PROBE, json.dumps([(op, str(path)) for op, path in ops])]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd="/")
    assert done.returncode == 0, done.stderr
    answers: list[str] = json.loads(done.stdout)
    return answers


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def open_root(group: int | None = None) -> Path:
    """A folder others may enter (pytest's tmp_path is root's alone, which would hide the
    workspace by itself), with a control file anyone may read; with ``group``, setgid of
    that group, so the workspace made inside belongs to it."""
    root = Path(tempfile.mkdtemp(prefix="ry-priv-", dir="/tmp"))
    (root / "control.txt").write_text("open to all\n")
    os.chmod(root / "control.txt", 0o644)
    if group is not None:
        os.chown(root, -1, group)
    os.chmod(root, 0o755 if group is None else 0o2755)
    return root


def run_secret_task(server: ServerProcess) -> dict[str, Any]:
    command = f"echo {TASK_SECRET}"
    handle = server.call("submit", task="command", task_name="secret", command=command)["answer"]
    server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"], poll_interval=0.05)
    status: dict[str, Any] = server.call("status", task_id=handle["task_id"])["answer"]
    assert status["state"] == "succeeded", status
    return status


def sensitive(server: ServerProcess, status: dict[str, Any]) -> dict[str, Path]:
    ws, logs = server.workspace, server.log_dir
    return {
        "state.db": ws / "agent" / "state.db",
        "task log": Path(status["log_path"]),
        "server.log": logs / "server.log",
        "status.json": ws / "base" / status["task_id"] / "status.json",
        "server.json": ws / "server.json",
    }


def attempts(server: ServerProcess, status: dict[str, Any]) -> list[tuple[str, Path]]:
    files = [("read", path) for path in sensitive(server, status).values()]
    return [*files, ("list", server.workspace), ("list", server.log_dir)]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[ServerProcess, dict[str, Any], dict[str, Any]]]:
    """A fresh workspace after a task that logged a secret and an agent run given one."""
    root = open_root()
    sandbox = "bwrap" if probe_bwrap(find_bwrap()) is None else "none"
    config = {"agent_packages_dir": str(PACKAGES), "agent_sandbox": sandbox}
    server = start_server(root, config=config)
    try:
        status = run_secret_task(server)
        run = agent_run(server, f"answer {PROMPT_SECRET}")
        yield server, status, run
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def agent_run(server: ServerProcess, prompt: str) -> dict[str, Any]:
    with httpx.Client(base_url=server.url + "/api/v1", headers=server.headers, timeout=90) as c:
        session = c.post("/sessions", json={"title": "private"}).json()["id"]
        body = {"sessionId": session, "userPrompt": prompt, "package": "probe"}
        reply = c.post("/runs", json=body)
        assert reply.status_code == 201, reply.text
        deadline = time.monotonic() + 90
        run: dict[str, Any] = reply.json()
        while run["state"] not in ("succeeded", "failed", "cancelled"):
            assert time.monotonic() < deadline, run
            time.sleep(0.05)
            run = c.get(f"/runs/{run['id']}").json()
    log = server.log_dir / "agent" / f"{run['id']}.log"
    assert run["state"] == "succeeded", (run, log.read_text()[-2000:] if log.exists() else "")
    return run


def test_another_user_reads_nothing_of_a_fresh_workspace(
    served: tuple[ServerProcess, dict[str, Any], dict[str, Any]],
) -> None:
    server, status, run = served
    store = [server.workspace / "agent" / name for name in ("state.db", "state.db-wal")]
    assert PROMPT_SECRET.encode() in b"".join(p.read_bytes() for p in store if p.exists())
    assert TASK_SECRET in Path(status["log_path"]).read_text()
    run_log = server.log_dir / "agent" / f"{run['id']}.log"
    answer = server.workspace / "agent" / "workspaces" / run["id"] / "out" / "final-answer.md"
    tries = [("read", server.root / "control.txt"), ("list", server.root)]
    tries += [*attempts(server, status), ("read", run_log), ("read", answer)]
    tries += [("read", path) for path in store if path.exists()]
    found = as_nobody(tries)
    assert found[:2] == ["ok", "ok"], found  # the probe can read what is open to it
    assert found[2:] == ["PermissionError"] * (len(tries) - 2), list(zip(tries, found, strict=True))


def test_what_the_server_makes_is_its_users_alone(
    served: tuple[ServerProcess, dict[str, Any], dict[str, Any]],
) -> None:
    server, status, run = served
    ws, logs = server.workspace, server.log_dir
    task_dir = ws / "base" / status["task_id"]
    folders = [ws, logs, ws / "agent", ws / "base", task_dir, Path(status["log_path"]).parent]
    assert {str(f): mode_of(f) for f in folders} == {str(f): 0o700 for f in folders}
    files = [*sensitive(server, status).values(), task_dir / "events.jsonl",
             task_dir / "metadata.json", logs / "agent" / f"{run['id']}.log"]  # fmt: skip
    files += [p for p in (ws / "agent").glob("state.db-*")] + list(logs.glob("prefork.log"))
    assert {str(f): mode_of(f) for f in files} == {str(f): 0o600 for f in files}
    opened = [p for p in walk(ws, logs) if mode_of(p) & 0o007]
    assert opened == [], "open to other users"
    grouped = [p for p in walk(ws, logs) if mode_of(p) & 0o070]
    # only where runs are given their group on purpose (their folders, the files handed
    # to them), never anywhere else
    deliberate = [ws / "agent" / name for name in ("workspaces", "session-state", "uploads")]
    assert [p for p in grouped if not any(p.is_relative_to(d) for d in deliberate)] == []


def walk(*folders: Path) -> list[Path]:
    """Everything under ``folders`` but symlinks (whose own mode means nothing)."""
    found = []
    for folder in folders:
        for parent, dirs, files in os.walk(folder):
            for name in dirs + files:
                path = Path(parent) / name
                if not path.is_symlink():
                    found.append(path)
    return found


def open_up(server: ServerProcess, status: dict[str, Any]) -> list[Path]:
    """Make the workspace look like one an older runyard left: folders 0755, files 0644."""
    ws, logs = server.workspace, server.log_dir
    task_dir = ws / "base" / status["task_id"]
    folders = [ws, ws / "agent", ws / "base", task_dir, logs, Path(status["log_path"]).parent,
               logs / "base"]  # fmt: skip
    files = [*sensitive(server, status).values(), ws / "agent" / "state.db-wal"]
    for folder in folders:
        os.chmod(folder, 0o755)
    for path in files:
        if path.exists():
            os.chmod(path, 0o644)
    return folders


def test_an_open_workspace_is_closed_at_start_and_the_log_says_so() -> None:
    root = open_root()
    try:
        server = start_server(root)
        try:
            status = run_secret_task(server)
        finally:
            server.stop()
        open_up(server, status)
        files = sensitive(server, status)
        before = as_nobody(attempts(server, status))
        assert before == ["ok"] * len(before), before  # open indeed, as an old one was
        server = start_server(root)
        server.stop()
        ws, logs = server.workspace, server.log_dir
        assert as_nobody(attempts(server, status)) == ["PermissionError"] * len(before)
        for folder in (ws, logs, ws / "agent", ws / "base", logs / "base"):
            assert mode_of(folder) == 0o700, folder
        for name in ("state.db", "server.log", "server.json"):
            assert mode_of(files[name]) == 0o600, name
        # deeper than the first level nothing is walked (start-up stays flat at any size):
        # the closed root is what keeps the task folder's files from others
        assert mode_of(ws / "base" / status["task_id"]) == 0o755
        lines = [line for line in (logs / "server.log").read_text().splitlines()
                 if "workspace_mode private: tightened" in line]  # fmt: skip
        assert len(lines) == 1, lines
        assert f"{ws} (0755 -> 0700)" in lines[0], lines
        assert f"{files['state.db']} (0644 -> 0600)" in lines[0], lines
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_group_mode_opens_the_workspace_to_its_group_only() -> None:
    root = open_root(group=TEAM_GID)
    try:
        server = start_server(root, config={"workspace_mode": "group"})
        try:
            status = run_secret_task(server)
            # the token stays the server user's: reading the workspace is not running it
            token = ("read", server.workspace / "server.json")
            tries = [t for t in attempts(server, status) if t != token]
            member = as_nobody([*tries, token], groups=(TEAM_GID,))
            stranger = as_nobody([*tries, token])
        finally:
            server.stop()
        assert member == ["ok"] * len(tries) + ["PermissionError"], (tries, member)
        assert stranger == ["PermissionError"] * (len(tries) + 1), (tries, stranger)
        ws = server.workspace
        for folder in (ws, server.log_dir, ws / "agent", ws / "base"):
            info = folder.lstat()
            assert (info.st_gid, stat.S_IMODE(info.st_mode)) == (TEAM_GID, 0o2770), folder
        assert [p for p in walk(ws, server.log_dir) if mode_of(p) & 0o007] == []
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(probe_bwrap(find_bwrap()) is not None, reason="needs bubblewrap")
def test_runs_as_another_user_pass_through_the_closed_workspace_and_see_nothing_else() -> None:
    # the run's sandbox is made as uid 1000 (bwrap after setpriv): it must reach its
    # folders through the workspace, which gives the run's group search permission only
    root = open_root()
    config = {"agent_packages_dir": str(PACKAGES), "agent_sandbox": "bwrap",
              "agent_run_uid": RUN_ID, "agent_run_gid": RUN_ID,
              "agent_python": SYSTEM_PYTHON}  # fmt: skip
    server = start_server(root, config=config)
    try:
        agent_run(server, "checkpoint\nanswer passed")
        ws = server.workspace
        way = [ws, ws / "agent", ws / "agent" / "workspaces", ws / "agent" / "session-state"]
        for folder in way:
            info = folder.lstat()
            assert (info.st_gid, stat.S_IMODE(info.st_mode)) == (RUN_ID, 0o710), folder
        tries = [("list", ws), ("list", ws / "agent"), ("read", ws / "agent" / "state.db")]
        assert as_nobody(tries) == ["PermissionError"] * 3
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
