"""``GET /api/v1/tasks/{id}/runs`` against a real server: the current run and the kept
earlier runs newest first in the documented shape, behind auth; ids that try to leave the
type folders are refused; a run token sees the runs of its own session's tasks only, and
any other task answers exactly as a missing one."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from serverproc import ServerProcess, start_server

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from agent_support import needs_bwrap  # noqa: E402
from api_helpers import agent_server, api, create_run, new_session, wait_run  # noqa: E402

RUN_KEYS = {
    "run_id", "state", "created_at", "started_at", "finished_at", "exit_code", "error", "current",
    "params", "metrics",
}  # fmt: skip


def runs_path(task_id: str) -> str:
    return f"/api/v1/tasks/{quote(task_id, safe='')}/runs"


def finished_run(server: ServerProcess, name: str, **inputs: object) -> dict[str, object]:
    handle = server.call("submit", task="demo", task_name=name, x=1, y=2, **inputs)["answer"]
    final = server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
    return final["answer"]  # type: ignore[no-any-return]


def test_runs_newest_first_behind_auth_and_no_escape(tmp_path: Path) -> None:
    server = start_server(tmp_path / "srv")
    try:
        first = finished_run(server, "runs")
        second = finished_run(server, "runs", fail=True)
        third = finished_run(server, "runs")
        task_id = "base#demo#runs"
        with server.client() as client:
            reply = client.get(runs_path(task_id))
            assert reply.status_code == 200, reply.text
            body = reply.json()
            assert body["task_id"] == task_id
            assert [r["run_id"] for r in body["runs"]] == [
                third["run_id"], second["run_id"], first["run_id"],
            ]  # fmt: skip
            assert [r["current"] for r in body["runs"]] == [True, False, False]
            assert all(set(r) == RUN_KEYS for r in body["runs"])
            newest, failed, oldest = body["runs"]
            assert newest["state"] == "succeeded" and newest["exit_code"] == 0
            assert failed["state"] == "failed" and failed["error"] and failed["exit_code"] != 0
            assert failed["params"]["fail"] is True and oldest["params"]["fail"] is False
            for run, status in ((oldest, first), (failed, second)):
                for key in ("created_at", "started_at", "finished_at", "state", "error"):
                    assert run[key] == status[key]
            assert client.get(runs_path("base#demo#never")).status_code == 404
            for bad in ("..%2f..%2fserver.json", "..%2f..", "base%23demo%23..%2f..%2fx"):
                refused = client.get(f"/api/v1/tasks/{bad}/runs")
                assert refused.status_code in (400, 404), (bad, refused.text)
                assert (
                    server.token not in refused.text and str(server.workspace) not in refused.text
                )
        with httpx.Client(base_url=server.url) as anonymous:
            assert anonymous.get(runs_path(task_id)).status_code == 401
            wrong = {"authorization": "Bearer wrong"}
            assert anonymous.get(runs_path(task_id), headers=wrong).status_code == 401
    finally:
        server.stop()


def job(label: str, name: str, **arguments: object) -> list[object]:
    return [label, "POST", f"/jobs/{name}", {"arguments": arguments}]


@pytest.mark.sandbox
@needs_bwrap
def test_a_run_token_sees_only_its_own_sessions_runs(tmp_path: Path) -> None:
    server = agent_server(tmp_path / "srv", "bwrap")
    try:
        finished_run(server, "admin-one")
        finished_run(server, "admin-one")
        admin_id, own_id, missing = "base#demo#admin-one", "base#demo#own", "base#demo#no-such"
        calls = [
            job("submit1", "submit", task="demo", task_name="own", x=1, y=2),
            job("wait1", "stream_task", task_id=own_id),
            job("submit2", "submit", task="demo", task_name="own", x=2, y=2),
            job("wait2", "stream_task", task_id=own_id),
            ["own", "GET", runs_path(own_id), None],
            ["admin", "GET", runs_path(admin_id), None],
            ["none", "GET", runs_path(missing), None],
            ["list", "GET", "/api/v1/tasks?limit=50", None],
        ]
        with api(server, timeout=120) as client:
            run = create_run(client, new_session(client), json.dumps(calls), package="scope_probe")
            done = wait_run(client, run["id"], timeout=90)
            assert done["state"] == "succeeded", done
            replies = client.get(f"/runs/{run['id']}/files/replies.json").json()
        own = replies["own"]
        assert own["status"] == 200, own
        assert [r["current"] for r in own["body"]["runs"]] == [True, False]
        assert own["body"]["runs"][1]["run_id"] == replies["submit1"]["body"]["answer"]["run_id"]
        listed = replies["list"]  # the task list too holds only this session's tasks
        assert listed["status"] == 200, listed
        assert [t["task_id"] for t in listed["body"]["items"]] == [own_id]
        assert listed["body"]["total"] == 1
        admin, none = replies["admin"], replies["none"]
        assert admin["status"] == none["status"] == 404
        assert admin["body"] == json.loads(json.dumps(none["body"]).replace(missing, admin_id))
        with server.client() as admin_client:  # the server token sees every task's runs
            seen = admin_client.get(runs_path(own_id)).json()["runs"]
            assert len(seen) == 2
            assert len(admin_client.get(runs_path(admin_id)).json()["runs"]) == 2
    finally:
        server.stop()
