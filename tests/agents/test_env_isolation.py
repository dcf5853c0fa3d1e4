"""The server's environment reaches admin tasks, never agent code: a real server started
with secrets in its environment, a real bubblewrap run, a real run-submitted task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_support import PACKAGES, needs_bwrap
from api_helpers import api, create_run, new_session, wait_run

from serverproc import start_server

pytestmark = [pytest.mark.sandbox, needs_bwrap]

SERVER_TOKEN = "server-env-token-0c7e41"
SERVER_ENV = {
    "RUNYARD_TOKEN": SERVER_TOKEN,  # how `RUNYARD_TOKEN=... runyard serve` sets the token
    "TOKEN_COPY": SERVER_TOKEN,
    "AUTH": f"Bearer {SERVER_TOKEN}",  # the token inside a value
    "HF_TOKEN": "hf_server_secret",
    "CUDA_VISIBLE_DEVICES": "1",
}
# worker_env reaches every task and run, but never with runyard's token in it
WORKER_ENV = {"AUTH_HEADER": f"Bearer {SERVER_TOKEN}", "WORKER_KEPT": "kept"}
DUMP_ENV = "python3 -c \"import json, os; json.dump(dict(os.environ), open('env.json', 'w'))\""


def job(name: str, **arguments: Any) -> list[Any]:
    return [name, "POST", f"/jobs/{name}", {"arguments": arguments}]


def task_env(workspace: Path, task_id: str) -> dict[str, str]:
    folder = workspace / task_id.split("#")[0] / task_id  # <type>/<task id>
    return json.loads((folder / "env.json").read_text())  # type: ignore[no-any-return]


def holding_the_token(env: dict[str, str]) -> list[str]:
    return [name for name, value in env.items() if SERVER_TOKEN in value]


def test_secrets_of_the_server_environment_reach_no_agent_code(tmp_path: Path) -> None:
    config = {
        "agent_packages_dir": str(PACKAGES), "agent_sandbox": "bwrap", "worker_env": WORKER_ENV,
    }  # fmt: skip
    server = start_server(tmp_path, config=config, env=SERVER_ENV)
    try:
        assert server.token == SERVER_TOKEN
        admin = server.call("submit", task="command", task_name="admin", command=DUMP_ENV)
        admin_id = admin["answer"]["task_id"]
        assert server.call("stream_task", task_id=admin_id)["answer"]["state"] == "succeeded"
        with api(server, timeout=120) as client:
            session = new_session(client)
            plain = wait_run(
                client, create_run(client, session, "answer hi", package="probe")["id"]
            )
            probes = client.get(f"/runs/{plain['id']}/files/probes.json")
            calls = [job("submit", task="command", task_name="from-run", command=DUMP_ENV),
                     job("stream_task", task_id="base#command#from-run")]  # fmt: skip
            scoped = create_run(client, session, json.dumps(calls), package="scope_probe")
            replies_run = wait_run(client, scoped["id"], timeout=90)
            replies = client.get(f"/runs/{scoped['id']}/files/replies.json").json()
    finally:
        server.stop()

    # an admin task sees what the server was started with, minus runyard's secrets
    admin_env = task_env(server.workspace, admin_id)
    assert admin_env["HF_TOKEN"] == "hf_server_secret" and admin_env["CUDA_VISIBLE_DEVICES"] == "1"
    assert "RUNYARD_TOKEN" not in admin_env and holding_the_token(admin_env) == []
    assert admin_env["WORKER_KEPT"] == "kept"

    # a plain agent run in its sandbox sees none of it
    assert plain["state"] == "succeeded" and plain["isolation"] == "bwrap", plain
    run_env = probes.json()["env"]
    assert run_env["RUNYARD_API_TOKEN"]  # its own, scoped token
    for leaked in (*SERVER_ENV, SERVER_TOKEN):
        assert leaked not in run_env and leaked not in run_env.values(), leaked
    assert holding_the_token(run_env) == [] and run_env["WORKER_KEPT"] == "kept"

    # nor does a task it submits with its run token
    assert replies_run["state"] == "succeeded", replies_run
    assert replies["stream_task"]["body"]["answer"]["state"] == "succeeded", replies
    sandboxed_env = task_env(server.workspace, "base#command#from-run")
    for leaked in (*SERVER_ENV, SERVER_TOKEN, "RUNYARD_API_TOKEN"):
        assert leaked not in sandboxed_env and leaked not in sandboxed_env.values(), leaked
    assert holding_the_token(sandboxed_env) == [] and sandboxed_env["WORKER_KEPT"] == "kept"
