"""Bearer-token auth: every route but /health (and the Studio's files) needs the token."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from serverproc import start_server


def test_token_required_when_configured(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "auth", token="s3cret-token")
    try:
        assert httpx.get(srv.url + "/health").status_code == 200
        for headers in (
            {},
            {"authorization": "Bearer wrong"},
            {"authorization": "Basic s3cret-token"},
        ):
            reply = httpx.post(
                srv.url + "/jobs/list_task_ids", json={"arguments": {}}, headers=headers
            )
            assert reply.status_code == 401 and "detail" in reply.json()
            assert httpx.get(srv.url + "/jobs", headers=headers).status_code == 401
            assert httpx.get(srv.url + "/openapi.json", headers=headers).status_code == 401
        good = {"authorization": "Bearer s3cret-token"}
        reply = httpx.post(srv.url + "/jobs/list_task_ids", json={"arguments": {}}, headers=good)
        assert reply.status_code == 200 and reply.json()["success"] is True
        assert httpx.get(srv.url + "/", headers={}).status_code == 200
    finally:
        srv.stop()


def test_no_token_allows_loopback_only(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "runyard", "serve", "--host", "0.0.0.0", "--port", "0",
            "--workspace-dir", str(tmp_path / "ws"), "--log-dir", str(tmp_path / "logs")]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert done.returncode != 0
    assert "without a token" in done.stderr
    assert not (tmp_path / "ws" / "server.json").exists()
