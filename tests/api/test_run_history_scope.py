"""A run token reads the kept runs of its own session's tasks only: the admin's kept run,
its files and its run list answer 404 exactly as a missing task does."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from agent_support import needs_bwrap  # noqa: E402
from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run  # noqa: E402


def _finished(server, command: str) -> dict:
    handle = server.call("submit", task="command", task_name="kept", command=command,
                         shell=True)["answer"]  # fmt: skip
    final = server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"],
                        poll_interval=0.05)  # fmt: skip
    assert final["success"] is True, final
    return final["answer"]


@pytest.mark.sandbox
@needs_bwrap
def test_a_run_token_sees_no_kept_run_of_another_session(tmp_path: Path) -> None:
    server = agent_server(tmp_path / "srv", "bwrap")
    try:
        first = _finished(server, "echo admin-secret > secret.txt")
        _finished(server, "echo again > secret.txt")
        with api(server, timeout=120) as client:
            session = new_session(client, "a")
            calls = [["hold", "GET", "release", None]]
            run = create_run(client, session, json.dumps(calls), package="scope_probe")
            token = wait_file(client, run["id"], "token").decode()
            try:
                _attack(server.url, token, first)
            finally:
                release = server.workspace / "agent" / "session-state" / session
                (release / "release").touch()
                wait_run(client, run["id"], timeout=90)
    finally:
        server.stop()


def _attack(url: str, token: str, first: dict) -> None:
    task = quote(first["task_id"], safe="")
    run1 = f"/api/v1/tasks/{task}/runs/{first['run_id']}"
    headers = {"authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as run:
        for path in (run1, f"{run1}/files/secret.txt", f"/api/v1/tasks/{task}/runs"):
            reply = run.get(path)
            assert reply.status_code == 404, (path, reply.status_code, reply.text)
            assert "admin-secret" not in reply.text and first["run_id"] not in reply.text
        log = run.post("/jobs/read_task_log", json={"arguments": {
            "task_id": first["task_id"], "run_id": first["run_id"]}})  # fmt: skip
        assert "admin-secret" not in log.text and log.json().get("success") is not True
