"""Cached results and run tokens, through a real server with a live run's token: a run's
submit is served only by a task of its own session (and the admin's only by the admin's),
even when the index names another; a sandboxed task cannot give itself another cache key
by writing records into its folder."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runyard.runtime.taskcache import ADMIN_OWNER, CACHE_DIR, CacheHints, session_owner
from runyard.workspace.layout import Workspace
from serverproc import ServerProcess, until

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from agent_support import needs_bwrap  # noqa: E402
from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run  # noqa: E402

# a run token submits tasks only where they run sandboxed, as the run does
pytestmark = [pytest.mark.sandbox, needs_bwrap]

PROBE = {"task": "command", "command": "echo probe > out.txt", "shell": True, "cache": True}


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str, str]]:
    """A server, a session, and the token of a live run of it (held until the end)."""
    srv = agent_server(tmp_path_factory.mktemp("cache-scopes") / "srv", "bwrap")
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


def call(http: httpx.Client, job: str, **arguments: Any) -> Any:
    reply = http.post(f"/jobs/{job}", json={"arguments": arguments})
    assert reply.status_code == 200 and reply.json()["success"], reply.text
    return reply.json()["answer"]


def ended(http: httpx.Client, handle: dict[str, Any]) -> dict[str, Any]:
    final = call(http, "wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
    assert final["state"] == "succeeded", final
    return dict(final)


def test_a_submit_is_served_only_by_a_task_of_its_own_submitter(
    held: tuple[ServerProcess, str, str],
) -> None:
    srv, session_id, run_token = held
    with _as(srv, srv.token or "") as admin, _as(srv, run_token) as run:
        admins = ended(admin, call(admin, "submit", **PROBE))
        first = call(run, "submit", **PROBE)
        assert "cached" not in first and first["task_id"] != admins["task_id"]
        runs = ended(run, first)
        assert runs["cache_key"] == admins["cache_key"]  # one key: the same task and inputs
        again = call(run, "submit", **PROBE)
        assert again["cached"] is True and again["task_id"] == runs["task_id"]
        mine = call(admin, "submit", **PROBE)
        assert mine["cached"] is True and mine["task_id"] == admins["task_id"]

        # an index that names the other submitter's task first is checked, not believed
        hints = CacheHints(srv.workspace / CACHE_DIR)
        hints.add(admins["cache_key"], session_owner(session_id), admins["task_id"])
        hints.add(admins["cache_key"], ADMIN_OWNER, runs["task_id"])
        served = call(run, "submit", **PROBE)
        assert served["cached"] is True and served["task_id"] == runs["task_id"]
        assert admins["task_id"] not in json.dumps(served)
        served = call(admin, "submit", **PROBE)
        assert served["cached"] is True and served["task_id"] == admins["task_id"]


FORGER = """
import json, os
task_id = os.environ["RUNYARD_TASK_ID"]
forged = {"task_id": task_id, "reg_name": "command", "created_at": "2026-01-01T00:00:00Z",
          "task_type": "base", "input_params": INPUTS, "output_params": {},
          "cache_key": KEY}
json.dump(forged, open("metadata.json", "w"))
status = {"task_id": task_id, "run_id": "0" * 32, "task_type": "base", "task_name": "command",
          "state": "succeeded", "created_at": "2026-01-01T00:00:00Z", "cache_key": KEY}
json.dump(status, open("status.json", "w"))
"""


def forger_command(inputs: dict[str, Any], key: str) -> str:
    script = FORGER.replace("INPUTS", repr(inputs)).replace("KEY", repr(key))
    encoded = base64.b64encode(script.encode()).decode()
    return f"python3 -c \"import base64; exec(base64.b64decode('{encoded}'))\""


def test_records_a_sandboxed_task_writes_do_not_give_it_another_key(
    held: tuple[ServerProcess, str, str],
) -> None:
    """The forger writes a metadata.json and a status.json claiming the key (and inputs) of
    another task of its session; the record keeper's records keep its own key, and a
    submit of that other key is not served by the forger even when the index names it."""
    srv, session_id, run_token = held
    workspace = Workspace(srv.workspace, srv.log_dir)
    probe = {**PROBE, "command": "echo victim > out.txt"}
    with _as(srv, run_token) as run:
        victim = ended(run, call(run, "submit", **probe))
        command = forger_command(victim["config"], victim["cache_key"])
        forger = ended(run, call(run, "submit", task="command", command=command, shell=True,
                                 cache=True))  # fmt: skip
        metadata = until(lambda: workspace.read_metadata(forger["task_id"]))
        assert forger["cache_key"] and forger["cache_key"] != victim["cache_key"]
        assert metadata.cache_key == forger["cache_key"]
        assert metadata.input_params == forger["config"]

        # the victim gone, an index that names the forger under the victim's key
        assert call(run, "delete_tasks", task_ids=[victim["task_id"]]) == [victim["task_id"]]
        hints = CacheHints(srv.workspace / CACHE_DIR)
        hints.add(victim["cache_key"], session_owner(session_id), forger["task_id"])
        fresh = call(run, "submit", **probe)
        assert "cached" not in fresh and fresh["task_id"] != forger["task_id"]
        assert ended(run, fresh)["cache_key"] == victim["cache_key"]
