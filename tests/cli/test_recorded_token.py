"""A user on the server's machine types no token: the CLI and ``Client.from_workspace`` read
the one the server recorded in its 0600 ``server.json`` — and send it to that server only."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from runyard.client import AsyncClient, Client
from runyard.errors import ServerUnreachable, Unauthorized
from serverproc import ServerProcess, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the module, its token generated and recorded in server.json."""
    proc = start_server(tmp_path_factory.mktemp("recorded") / "srv")
    try:
        yield proc
    finally:
        proc.stop()


def bare_cli(srv: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with no RUNYARD_* variable at all: no URL, no token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    return subprocess.run(
        [sys.executable, "-m", "runyard", *args, "--workspace-dir", str(srv.workspace)],
        cwd=srv.root, env=env, capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_cli_uses_the_recorded_token(server: ServerProcess) -> None:
    assert server.token  # generated: start_server gave none
    done = bare_cli(server, "submit", "demo", "x=2", "y=3", "--name", "tok", "--wait", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["result"] == 5
    listed = bare_cli(server, "ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "base#demo#tok" in listed.stdout
    session = bare_cli(server, "agent", "create-session", "--title", "cli", "--json")
    assert session.returncode == 0, session.stderr
    closed = bare_cli(server, "agent", "close", json.loads(session.stdout)["id"], "--json")
    assert closed.returncode == 0 and json.loads(closed.stdout)["status"] == "CLOSED"


def test_an_explicit_token_wins(server: ServerProcess) -> None:
    before = server.call("list_task_ids")["answer"]
    done = bare_cli(server, "submit", "demo", "x=1", "y=1", "--token", "not-the-token")
    assert done.returncode != 0 and "401" in done.stderr, done.stderr
    assert server.call("list_task_ids")["answer"] == before  # nothing was submitted


class _Recorder(BaseHTTPRequestHandler):
    seen: list[str | None] = []

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        self.seen.append(self.headers.get("authorization"))
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self._answer({"answer": [], "success": True, "metadata": {}})

    def do_GET(self) -> None:  # noqa: N802 (``ls`` asks for one page of /api/v1/tasks)
        self.seen.append(self.headers.get("authorization"))
        self._answer({"items": [], "next_cursor": None, "total": 0})

    def _answer(self, answer: dict[str, object]) -> None:
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def other_server() -> Iterator[tuple[str, list[str | None]]]:
    seen: list[str | None] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_recorded_token_never_goes_to_another_url(
    server: ServerProcess, other_server: tuple[str, list[str | None]]
) -> None:
    url, seen = other_server
    done = bare_cli(server, "ls", "--url", url, "--json")
    assert done.returncode == 0, done.stderr
    assert seen == [None]


def test_client_from_workspace(server: ServerProcess, tmp_path: Path) -> None:
    with Client.from_workspace(server.workspace) as client:
        handle = client.submit("demo", task_name="from-ws", x=3, y=4)
        status = client.wait_task(handle.task_id, handle.run_id, poll_interval=0.05)
        assert status.result["result"] == 7
    project = tmp_path / "project"
    project.mkdir()
    (project / ".runyard").symlink_to(server.workspace)  # a project folder holding .runyard
    with Client.from_workspace(project) as client:
        assert "base#demo#from-ws" in client.list_task_ids()
    with pytest.raises(ServerUnreachable, match="server.json"):
        Client.from_workspace(tmp_path / "nowhere")
    with Client(server.url) as anonymous, pytest.raises(Unauthorized):
        anonymous.list_task_ids()


def test_async_client_from_workspace(server: ServerProcess) -> None:
    async def scenario() -> list[str]:
        async with AsyncClient.from_workspace(server.workspace) as client:
            return await client.list_task_ids()

    assert asyncio.run(scenario()) == server.call("list_task_ids")["answer"]
