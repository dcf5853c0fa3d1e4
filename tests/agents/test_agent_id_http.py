"""Ids that are not one path component, through a real server: in a path (``%2e%2e``,
encoded slashes), a query or a body, each answers 404 or 422 with a message, never a 500,
and the host folder such an id climbs to is never touched — also when the store already
holds a session with that id and a queued run in it (an edited or restored ``state.db``)."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import httpx
from agent_support import PACKAGES

from runyard.agents.models import new_id
from runyard.agents.store import SQLiteStore
from serverproc import start_server

NOW = "2026-01-01T00:00:00.000000Z"


def sentinel_folder(root: Path) -> Path:
    folder = root / "sentinel"
    folder.mkdir(mode=0o700)
    folder.chmod(0o700)
    (folder / "keep.txt").write_text("host data")
    return folder


def state_of(folder: Path) -> tuple[int, list[str], str]:
    mode = stat.S_IMODE(folder.lstat().st_mode)
    return mode, sorted(os.listdir(folder)), (folder / "keep.txt").read_text()


def plant_hostile_session(agent_root: Path, climb: str) -> str:
    """The store a crafted backup (or an editor) left: a session named ``climb`` with a
    queued run, which a server would start, making ``session-state/<climb>`` its state."""
    agent_root.mkdir(parents=True)
    SQLiteStore(agent_root / "state.db").close()
    run_id = new_id("run")
    conn = sqlite3.connect(agent_root / "state.db")
    conn.execute(
        "INSERT INTO sessions (id, title, status, created_at, updated_at) "
        "VALUES (?, 'evil', 'OPEN', ?, ?)",
        (climb, NOW, NOW),
    )
    conn.execute(
        "INSERT INTO runs (id, session_id, state, user_prompt, package, created_at) "
        "VALUES (?, ?, 'queued', 'answer hi', 'probe', ?)",
        (run_id, climb, NOW),
    )
    conn.commit()
    conn.close()
    return run_id


def refused(reply: httpx.Response) -> str:
    assert reply.status_code in (404, 422), (reply.request.url, reply.status_code, reply.text)
    return reply.text


def test_bad_ids_over_http_answer_404_or_422_and_touch_no_host_folder(tmp_path: Path) -> None:
    sentinel = sentinel_folder(tmp_path)
    before = state_of(sentinel)
    workspace = tmp_path / "srv" / "ws"
    agent_root = workspace / "agent"
    climb = os.path.relpath(sentinel, agent_root / "session-state")
    hostile_run = plant_hostile_session(agent_root, climb)
    config = {"agent_packages_dir": str(PACKAGES), "agent_sandbox": "none",
              "allowed_mount_roots": [str(tmp_path)]}  # fmt: skip
    server = start_server(tmp_path / "srv", config=config, workspace=workspace)
    try:
        with httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as client:
            good = client.post("/api/v1/sessions", json={"title": "good"}).json()["id"]
            encoded = climb.replace(".", "%2e").replace("/", "%2F")
            paths = [
                "/api/v1/sessions/%2e%2e", "/api/v1/sessions/%2e%2e/state",
                f"/api/v1/sessions/{encoded}", f"/api/v1/sessions/{encoded}/state",
                "/api/v1/runs/%2e%2e", "/api/v1/runs/%2e%2e/files",
                "/api/v1/runs/run%2F..%2F..%2Fx/files", "/api/v1/artifacts/%2e%2e/content",
                "/api/v1/sessions/%2e%2e/checkpoints/%2e%2e/files",
                f"/api/v1/sessions/{good}/checkpoints/%2e%2e/files/x",
                f"/api/v1/runs?sessionId={encoded}", f"/api/v1/artifacts?sessionId={encoded}",
                f"/api/v1/mount-grants?sessionId={encoded}", f"/api/v1/runs/{hostile_run}",
            ]  # fmt: skip
            said = [refused(client.get(path)) for path in paths]
            assert "Invalid session id '..'" in said[0]
            assert "Invalid run id '..'" in said[4]
            posts = [
                ("/api/v1/sessions/%2e%2e/close", None),
                ("/api/v1/sessions/%2e%2e/reopen", None),
                ("/api/v1/runs", {"sessionId": climb, "userPrompt": "answer hi"}),
                ("/api/v1/runs", {"sessionId": good, "userPrompt": "x", "artifactIds": [".."]}),
                ("/api/v1/runs", {"sessionId": good, "userPrompt": "x", "mountGrantIds": ["a/b"]}),
                ("/api/v1/mount-grants", {"sessionId": climb, "name": "d",
                                          "hostPath": str(sentinel), "access": "rw"}),
                (f"/api/v1/sessions/{good}/fork", {"runId": "../x"}),
                (f"/api/v1/sessions/{good}/restore", {"runId": "../x"}),
                ("/api/v1/runs/%2e%2e/cancel", None),
            ]  # fmt: skip
            for path, body in posts:
                said.append(refused(client.post(path, json=body)))
            assert f"Invalid session id {climb!r}" in said[len(paths) + 2]
            upload = client.post("/api/v1/artifacts/upload", data={"sessionId": climb},
                                 files={"file": ("a.csv", b"a\n", "text/csv")})  # fmt: skip
            assert "Invalid session id" in refused(upload)
            refused(client.delete("/api/v1/mount-grants/%2e%2e"))
            listed = client.get("/api/v1/sessions").json()["items"]
            assert [session["id"] for session in listed] == [good]
    finally:
        server.stop()
    assert state_of(sentinel) == before
    assert "Traceback" not in "".join(server.output)
