"""Bearer-token auth, on by default: every route but /health (and the Studio's files) needs
the token — configured, or generated at start and recorded in a 0600 server.json."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from runyard.api.address import write_server_file
from runyard.api.server import check_binding, with_token_in_force
from runyard.config import Settings
from runyard.errors import ConfigError
from serverproc import ServerProcess, start_server


@pytest.fixture(scope="module")
def configured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server started with a token of its own: the tests on it only read."""
    srv = start_server(tmp_path_factory.mktemp("auth") / "srv", token="s3cret-token")
    try:
        yield srv
    finally:
        srv.stop()


def test_token_required_when_configured(configured: ServerProcess) -> None:
    srv = configured
    assert httpx.get(srv.url + "/health").status_code == 200
    for headers in (
        {},
        {"authorization": "Bearer wrong"},
        {"authorization": "Basic s3cret-token"},
    ):
        reply = httpx.post(srv.url + "/jobs/list_task_ids", json={"arguments": {}}, headers=headers)
        assert reply.status_code == 401 and "detail" in reply.json()
        assert httpx.get(srv.url + "/jobs", headers=headers).status_code == 401
        assert httpx.get(srv.url + "/openapi.json", headers=headers).status_code == 401
    good = {"authorization": "Bearer s3cret-token"}
    reply = httpx.post(srv.url + "/jobs/list_task_ids", json={"arguments": {}}, headers=good)
    assert reply.status_code == 200 and reply.json()["success"] is True
    assert httpx.get(srv.url + "/", headers={}).status_code == 200


def test_only_health_and_the_studio_files_are_open(configured: ServerProcess) -> None:
    """Deny by default: a route nobody listed as protected still needs the token."""
    srv = configured
    opened = ("/health", "/", "/index.html", "/favicon.svg", "/js/main.js", "/css/studio.css")
    for path in (*opened, "/docs"):  # /docs: a static page; what it reads is closed
        assert httpx.get(srv.url + path).status_code == 200, path
    closed = [
        "/jobs", "/openapi.json", "/docs/", "/docs/x", "/redoc", "/metrics", "/mcp", "/api/v1/sessions",
        "/api/v1/packages", "/no-such-route", "/js/../openapi.json", "/health/../jobs",
    ]  # fmt: skip
    for path in closed:
        reply = httpx.get(srv.url + path)
        assert reply.status_code == 401, (path, reply.status_code)
    reply = httpx.post(srv.url + "/", json={}, headers={})
    assert reply.status_code == 401
    assert httpx.get(srv.url + "/metrics", headers=srv.headers).status_code == 200


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_token_is_generated_and_recorded_for_the_owner_only(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "gen")
    try:
        record = srv.workspace / "server.json"
        assert stat.S_IMODE(record.stat().st_mode) == 0o600
        info = json.loads(record.read_text())
        assert set(info) >= {"url", "pid", "token"} and info["url"] == srv.url
        token = info["token"]
        assert isinstance(token, str) and len(token) >= 32
        assert f"Studio: {srv.url}/#login=" in "".join(srv.output)
        assert token not in "".join(srv.output)  # the banner's link holds a one-time code
        anonymous = httpx.post(srv.url + "/jobs/list_task_ids", json={"arguments": {}})
        assert anonymous.status_code == 401
        assert httpx.get(srv.url + "/api/v1/sessions").status_code == 401
        assert httpx.get(srv.url + "/health").status_code == 200
        assert httpx.get(srv.url + "/").status_code == 200  # the Studio's files
        good = {"authorization": f"Bearer {token}"}
        reply = httpx.post(srv.url + "/jobs/list_task_ids", json={"arguments": {}}, headers=good)
        assert reply.status_code == 200 and reply.json()["success"] is True
    finally:
        srv.stop()
    second = start_server(tmp_path / "gen")  # the token kept in server.json
    try:
        assert second.token == token
    finally:
        second.stop()


def test_server_file_is_never_readable_by_others(tmp_path: Path) -> None:
    """Written under a umask that would leave it world-readable, it is still 0600."""
    record = tmp_path / "server.json"
    previous = os.umask(0)
    try:
        write_server_file(record, {"url": "http://127.0.0.1:1", "pid": 1, "token": "t"})
        write_server_file(record, {"url": "http://127.0.0.1:2", "pid": 1, "token": "u"})
    finally:
        os.umask(previous)
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert json.loads(record.read_text())["token"] == "u"
    assert [p.name for p in tmp_path.iterdir()] == ["server.json"]


def test_no_auth_off_loopback_is_refused_before_binding(tmp_path: Path) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "runyard", "serve", "--host", "0.0.0.0", "--port", str(port),
            "--no-auth", "--workspace-dir", str(tmp_path / "ws"),
            "--log-dir", str(tmp_path / "logs")]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert done.returncode != 0 and time.monotonic() - started < 30
    assert "--no-auth" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert done.stdout == ""
    assert not (tmp_path / "ws" / "server.json").exists()
    assert not (tmp_path / "ws" / "agent" / "sock").exists()
    with socket.socket() as probe:  # nothing was bound: the port is still free
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("0.0.0.0", port))


def test_no_auth_on_loopback_warns_and_serves_without_token(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "open", auth=False)
    try:
        assert srv.token is None
        assert any(line.startswith("warning: auth is off") for line in srv.output)
        assert json.loads((srv.workspace / "server.json").read_text())["token"] is None
        assert "#token=" not in "".join(srv.output)
        reply = httpx.post(srv.url + "/jobs/list_task_ids", json={"arguments": {}})
        assert reply.status_code == 200 and reply.json()["success"] is True
    finally:
        srv.stop()


def test_a_wildcard_bind_with_auth_on_is_allowed() -> None:
    """Only --no-auth is refused off loopback; auth on gets a generated token there."""
    for host in ("0.0.0.0", "::", "10.1.2.3"):
        check_binding(Settings(host=host))
        assert with_token_in_force(Settings(host=host)).token
        with pytest.raises(ConfigError, match="--no-auth"):
            check_binding(Settings(host=host, auth=False))
    check_binding(Settings(host="127.0.0.1", auth=False))
    assert with_token_in_force(Settings(auth=False, token="x")).token is None
    assert with_token_in_force(Settings(token="mine")).token == "mine"
