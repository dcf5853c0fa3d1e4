"""Retries of a task an agent run submitted: each attempt runs in its sandbox with the run's
scope, its records written by its record keeper, and every attempt is kept; against a
real server and a real bubblewrap sandbox."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from agent_support import needs_bwrap
from api_helpers import agent_server, api, create_run, new_session, wait_run

from runyard.workspace.layout import Workspace
from serverproc import until

pytestmark = [pytest.mark.sandbox, needs_bwrap]


def job(name: str, **arguments: Any) -> list[Any]:
    return [name, "POST", f"/jobs/{name}", {"arguments": arguments}]


def test_a_run_submitted_task_is_retried_in_its_sandbox(tmp_path: Path) -> None:
    server = agent_server(tmp_path, "bwrap", token="server-secret")
    try:
        with api(server, timeout=120) as client:
            session = new_session(client)
            submit = job(
                "submit", task="command", task_name="shaky", retries=1, retry_delay_seconds=0, shell=True,
                command="echo attempt-in-sandbox; touch left-behind; exit 3",
            )  # fmt: skip
            run = create_run(client, session, json.dumps([submit]), package="scope_probe")
            done = wait_run(client, run["id"], timeout=90)
            assert done["state"] == "succeeded", done
            replies = client.get(f"/runs/{run['id']}/files/replies.json").json()
        handle = replies["submit"]["body"]["answer"]
        task_id = handle["task_id"]

        def final() -> dict[str, Any] | None:
            found = server.call("status", task_id=task_id)["answer"]
            return found if found["state"] == "failed" and found.get("attempt") == 2 else None

        try:
            last = until(final, timeout=30)
        except AssertionError:
            raise AssertionError(server.call("status", task_id=task_id)["answer"]) from None
        assert last["exit_code"] == 3 and last["retry_of"] == handle["run_id"]
        assert last["submitted_by"]["session_id"] == session  # still the run's task
        with server.client() as http:
            runs = http.get(f"/api/v1/tasks/{quote(task_id, safe='')}/runs").json()["runs"]
        assert [(r["state"], r["attempt"]) for r in runs] == [("failed", 2), ("failed", 1)]
        workspace = Workspace(server.workspace, server.log_dir)
        for entry in runs:  # each attempt ran in the sandbox and kept its own log
            log = workspace.run_log_path(task_id, entry["run_id"]).read_text()
            assert "attempt-in-sandbox" in log
    finally:
        server.stop()
