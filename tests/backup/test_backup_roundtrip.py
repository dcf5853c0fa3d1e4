"""A backup taken while 20 tasks and an agent run write, restored into a new folder: a
server there serves every task, log, artifact, session and run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "agents"))

from agent_support import PACKAGES  # noqa: E402
from api_helpers import api, create_run, new_session, upload, wait_file, wait_run  # noqa: E402

from serverproc import ServerProcess, start_server  # noqa: E402

RUNNING = 20
WRITER = "for i in $(seq 1 600); do echo line $i; echo $i >> progress.txt; sleep 0.05; done"
CONFIG = {
    "agent_packages_dir": str(PACKAGES), "agent_sandbox": "none",
    "max_concurrent_tasks": RUNNING + 4,
}  # fmt: skip


def runyard(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    argv = [sys.executable, "-m", "runyard", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=110, env=env)


def submit(server: ServerProcess, name: str, command: str) -> str:
    reply = server.call("submit", task="command", task_name=name, command=command, shell=True)
    assert reply["success"], reply
    return str(reply["answer"]["task_id"])


def wait_state(server: ServerProcess, task_id: str, states: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = server.call("status", task_id=task_id)["answer"]
        if status["state"] in states:
            return status  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise AssertionError(f"{task_id} never reached {states}")


def task_log(server: ServerProcess, task_id: str) -> str:
    reply = server.call("read_task_log", task_id=task_id, offset=0, limit=1 << 18)
    assert reply["success"], reply
    return str(reply["answer"]["content"])


def fill_workspace(server: ServerProcess) -> dict[str, Any]:
    done = [submit(server, f"done-{n}", f"echo finished {n}; echo result-{n} > out.txt")
            for n in range(3)]  # fmt: skip
    for task_id in done:
        assert wait_state(server, task_id, {"succeeded"})["state"] == "succeeded"
    running = [submit(server, f"run-{n}", WRITER) for n in range(RUNNING)]
    for task_id in running:
        wait_state(server, task_id, {"running"})
    with api(server) as client:
        session = new_session(client, "kept")
        assert upload(client, session, b"a,b\n1,2\n").status_code == 201
        first = create_run(
            client, session, "write out/first.txt one\nanswer first done", package="probe"
        )
        assert wait_run(client, first["id"])["state"] == "succeeded"
        second = create_run(
            client, session, "write out/live.txt partial\nsleep 60", package="probe"
        )
        assert wait_file(client, second["id"], "live.txt") == b"partial"
    return {"done": done, "running": running, "session": session,
            "first": first["id"], "second": second["id"]}  # fmt: skip


ARCHIVES = ["backup.tar.gz", "backup.tar"]


@pytest.fixture(scope="module")
def backups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], Path]]:
    """One busy workspace, backed up in each format while its tasks and run still write."""
    root = tmp_path_factory.mktemp("backups")
    server = start_server(root / "old", config=CONFIG)
    try:
        made = fill_workspace(server)
        for name in ARCHIVES:
            created = runyard("backup", "create", root / name, "--workspace-dir",
                              server.workspace, "--log-dir", server.log_dir)  # fmt: skip
            assert created.returncode == 0, created.stderr
    finally:
        server.stop()
    yield made, root


@pytest.mark.parametrize("name", ARCHIVES)
def test_backup_while_running_restores_everything(
    tmp_path: Path, backups: tuple[dict[str, Any], Path], name: str
) -> None:
    made, root = backups
    archive = root / name
    assert runyard("backup", "verify", archive).returncode == 0
    new_root = tmp_path / "new"
    restored = runyard("backup", "restore", archive, "--workspace-dir", new_root / "ws",
                       "--log-dir", new_root / "logs")  # fmt: skip
    assert restored.returncode == 0, restored.stderr
    assert not (new_root / "ws" / "server.json").exists()  # only the new server's token
    again = start_server(new_root, config=CONFIG, workspace=new_root / "ws")
    try:
        check_tasks(again, made)
        check_agent(again, made)
    finally:
        again.stop()


def check_tasks(server: ServerProcess, made: dict[str, Any]) -> None:
    for n, task_id in enumerate(made["done"]):
        status = server.call("status", task_id=task_id)["answer"]
        assert status["state"] == "succeeded"
        assert status["log_path"].startswith(str(server.log_dir))
        assert f"finished {n}" in task_log(server, task_id)
        with server.client() as client:
            reply = client.get(f"/api/v1/tasks/{quote(task_id, safe='')}/files/out.txt")
        assert reply.status_code == 200 and reply.text == f"result-{n}\n"
    for task_id in made["running"]:
        status = server.call("status", task_id=task_id)["answer"]
        assert status["state"] == "failed", status
        assert status["error"] == "interrupted: restored from backup"
        assert status["exit_code"] == 1
        assert status["log_path"].startswith(str(server.log_dir))
        assert "line 1\n" in task_log(server, task_id)
    listed = server.call("list_task_ids")["answer"]
    ids = listed["items"] if isinstance(listed, dict) else listed
    assert set(made["done"] + made["running"]) <= set(ids)


def check_agent(server: ServerProcess, made: dict[str, Any]) -> None:
    with api(server) as client:
        session = client.get(f"/sessions/{made['session']}").json()
        assert session["title"] == "kept"
        assert any(turn["content"] == "first done" for turn in session["history"]), session
        uploads = client.get("/artifacts", params={"sessionId": made["session"]}).json()
        (artifact,) = uploads["items"]
        assert client.get(f"/artifacts/{artifact['id']}/content").content == b"a,b\n1,2\n"
        assert client.get(f"/runs/{made['first']}").json()["state"] == "succeeded"
        assert client.get(f"/runs/{made['first']}/files/first.txt").content == b"one"
        second = client.get(f"/runs/{made['second']}").json()
        assert second["state"] == "failed"
        assert second["error"] == "interrupted: restored from backup"
        assert client.get(f"/runs/{made['second']}/files/live.txt").content == b"partial"
