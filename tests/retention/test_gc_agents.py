"""gc and the agent-run backend, on a real server: old run workspaces and stray uploads
go, open runs and recorded uploads stay, and a run token may not collect."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from api_helpers import (  # noqa: E402
    agent_server,
    api,
    create_run,
    error_of,
    new_session,
    upload,
    wait_file,
    wait_run,
)
from gc_helpers import gc  # noqa: E402

from serverproc import ServerProcess  # noqa: E402

AGE_SECONDS = 2.0


def test_old_run_workspaces_and_stray_uploads_go_open_runs_stay(tmp_path: Path) -> None:
    retention = {"max_age_days": AGE_SECONDS / 86400}
    server = agent_server(tmp_path / "srv", "none", retention=retention)
    agent = server.workspace / "agent"
    try:
        with api(server) as client:
            session_id = new_session(client)
            kept = upload(client, session_id, b"a,b\n1,2\n").json()
            old = create_run(client, session_id, "answer done", package="probe")
            assert wait_run(client, old["id"])["state"] == "succeeded"
            for recorded in (agent / "uploads").iterdir():  # recorded long ago: still kept
                os.utime(recorded, (time.time() - 7200, time.time() - 7200))
            stray = agent / "uploads" / "art_stray-left.csv"
            stray.write_bytes(b"x" * 1000)
            os.utime(stray, (time.time() - 7200, time.time() - 7200))
            fresh_partial = agent / "uploads" / ".partial-inflight"
            fresh_partial.write_bytes(b"y" * 10)  # an upload in progress: too young to go
            time.sleep(AGE_SECONDS + 0.5)
            open_run = create_run(
                client, session_id, "token\nwait-for go\nanswer done", package="probe"
            )
            run_token = wait_file(client, open_run["id"], "token").decode()
            try:
                refused = httpx.post(
                    server.url + "/api/v1/gc", json={"dryRun": True},
                    headers={"authorization": f"Bearer {run_token}"}, timeout=30,
                )  # fmt: skip
                assert error_of(refused, 403)["code"] == "forbidden"
                _collect_and_check(server, client, old["id"], open_run["id"], stray)
                assert fresh_partial.is_file()
                assert client.get(f"/artifacts/{kept['id']}/content").content == b"a,b\n1,2\n"
            finally:
                (agent / "session-state" / session_id / "go").touch()
                assert wait_run(client, open_run["id"])["state"] == "succeeded"
    finally:
        server.stop()


def _collect_and_check(
    server: ServerProcess, client: httpx.Client, old_id: str, open_id: str, stray: Path
) -> None:
    agent = server.workspace / "agent"
    preview = gc(server, "--dry-run")
    assert preview["run_workspaces"] == [old_id]
    assert preview["uploads"] == [stray.name]
    assert (agent / "workspaces" / old_id).is_dir() and stray.is_file()
    done = gc(server)
    assert done["run_workspaces"] == [old_id] and done["uploads"] == [stray.name]
    assert done["bytes"] == preview["bytes"] >= 1000
    assert not (agent / "workspaces" / old_id).exists() and not stray.exists()
    assert (agent / "workspaces" / open_id).is_dir()
    assert client.get(f"/runs/{old_id}").json()["state"] == "succeeded"  # the record stays
    assert client.get(f"/runs/{open_id}").json()["state"] == "running"
