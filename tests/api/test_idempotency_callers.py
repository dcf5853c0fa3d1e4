"""An Idempotency-Key belongs to its caller: through a real server, a run token sending the
admin's key (with the admin's very body, or another) never gets the admin's answer, nor the
reverse; each caller's own key still replays its answer and refuses another body (409); one
key on two routes is two keys."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from serverproc import ServerProcess

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from agent_support import needs_bwrap  # noqa: E402
from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run  # noqa: E402

# a run token submits tasks only where they run sandboxed, as the run does
pytestmark = [pytest.mark.sandbox, needs_bwrap]

KEY = {"Idempotency-Key": "shared-key"}
BODY_A = {"arguments": {"task": "demo", "x": 1, "y": 2}}
BODY_B = {"arguments": {"task": "demo", "x": 5, "y": 2}}
REPLAYED = "idempotent-replayed"


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str, str]]:
    """A server, a session, and the token of a live run of it (held until the end)."""
    srv = agent_server(tmp_path_factory.mktemp("keys") / "srv", "bwrap")
    try:
        with api(srv, timeout=120) as client:
            session_id = new_session(client)
            calls = [["hold", "GET", "release", None]]
            run = create_run(client, session_id, json.dumps(calls), package="scope_probe")
            token = wait_file(client, run["id"], "token").decode()
            try:
                yield srv, session_id, token
            finally:
                (srv.workspace / "agent" / "session-state" / session_id / "release").touch()
                wait_run(client, run["id"], timeout=90)
    finally:
        srv.stop()


def _as(srv: ServerProcess, token: str) -> httpx.Client:
    return httpx.Client(base_url=srv.url, headers={"authorization": f"Bearer {token}"}, timeout=60)


def _submit(http: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    return http.post("/jobs/submit", json=body, headers=KEY)


def test_a_run_never_gets_the_admins_answer_for_the_same_key(
    held: tuple[ServerProcess, str, str],
) -> None:
    srv, _, run_token = held
    with _as(srv, srv.token or "") as admin, _as(srv, run_token) as run:
        first = _submit(admin, BODY_A)
        assert first.status_code == 200 and first.json()["success"], first.text
        admins = first.json()["answer"]["task_id"]
        # the same key and the same body from another caller: its own new task
        theirs = _submit(run, BODY_A)
        assert theirs.status_code == 200 and theirs.json()["success"], theirs.text
        assert REPLAYED not in theirs.headers
        runs_task = theirs.json()["answer"]["task_id"]
        assert runs_task != admins and admins not in theirs.text
        # the admin's task stays hidden from the run; its own answer replays
        hidden = run.post("/jobs/status", json={"arguments": {"task_id": admins}})
        assert hidden.json()["success"] is False
        again = _submit(run, BODY_A)
        assert again.headers.get(REPLAYED) == "true"
        assert again.json()["answer"]["task_id"] == runs_task
        # the same caller, the same key, another body: refused, for each caller alike
        for http in (run, admin):
            other = _submit(http, BODY_B)
            assert other.status_code == 409, other.text
            assert "Idempotency-Key" in other.json()["answer"]
        # and the admin's key still answers the admin's task, never the run's
        mine = _submit(admin, BODY_A)
        assert mine.headers.get(REPLAYED) == "true"
        assert mine.json()["answer"]["task_id"] == admins


def test_a_run_key_sent_first_does_not_answer_the_admin(
    held: tuple[ServerProcess, str, str],
) -> None:
    """The other order: the run uses a key first, then the admin sends it with another body
    (no 409: it is not the admin's key) and with the run's body (a task of the admin's)."""
    srv, _, run_token = held
    key = {"Idempotency-Key": "run-first"}
    with _as(srv, srv.token or "") as admin, _as(srv, run_token) as run:
        runs = run.post("/jobs/submit", json=BODY_B, headers=key)
        assert runs.status_code == 200, runs.text
        other = admin.post("/jobs/submit", json=BODY_A, headers=key)
        assert other.status_code == 200 and other.json()["success"], other.text
        same = admin.post("/jobs/submit", json=BODY_B, headers=key)
        assert same.status_code == 409  # the admin's own key now holds BODY_A
        assert REPLAYED not in other.headers
        assert other.json()["answer"]["task_id"] != runs.json()["answer"]["task_id"]


def test_keys_of_runs_are_per_caller_and_per_route(held: tuple[ServerProcess, str, str]) -> None:
    srv, session_id, run_token = held
    body = {"sessionId": session_id, "userPrompt": "[]", "package": "scope_probe", "enqueue": True}
    key = {"Idempotency-Key": "runs-key"}
    with _as(srv, srv.token or "") as admin, _as(srv, run_token) as run:
        made = admin.post("/api/v1/runs", json=body, headers=key)
        assert made.status_code == 201, made.text
        theirs = run.post("/api/v1/runs", json=body, headers=key)  # a run of its session
        assert theirs.status_code == 201 and REPLAYED not in theirs.headers, theirs.text
        assert theirs.json()["id"] != made.json()["id"] and made.json()["id"] not in theirs.text
        again = admin.post("/api/v1/runs", json=body, headers=key)
        assert again.status_code == 201 and again.json()["id"] == made.json()["id"]
        refused = admin.post("/api/v1/runs", json={**body, "userPrompt": "[ ]"}, headers=key)
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "conflict"
        # the same key on the submit route is another key: a task, not the run's answer
        submitted = admin.post("/jobs/submit", json=BODY_A, headers=key)
        assert submitted.status_code == 200 and submitted.json()["success"], submitted.text
        assert REPLAYED not in submitted.headers
        assert made.json()["id"] not in submitted.text
