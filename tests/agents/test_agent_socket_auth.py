"""The agent-run Unix socket: reachable by runs only, and it opens to run tokens only."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run

from runyard.agents.layout import AgentLayout
from serverproc import ServerProcess

NOBODY = 65534


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("runyard", timeout=30)
        self.socket_path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.socket_path)


def socket_path(server: ServerProcess) -> Path:
    return AgentLayout(server.workspace / "agent", server.log_dir).socket_path()


def over_socket(server: ServerProcess, method: str, path: str, token: str) -> tuple[int, str]:
    conn = UnixConnection(socket_path(server))
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    body = json.dumps({"arguments": {}}) if path.startswith("/jobs") else None
    try:
        conn.request(method, path, body=body, headers=headers)
        reply = conn.getresponse()
        return reply.status, reply.read().decode()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = agent_server(tmp_path_factory.mktemp("sock"), "none")
    try:
        yield srv
    finally:
        srv.stop()


def test_admin_token_is_refused_and_a_run_token_accepted(server: ServerProcess) -> None:
    assert server.token
    for path in ("/jobs/list_task_ids", "/api/v1/sessions"):
        method = "POST" if path.startswith("/jobs") else "GET"
        status, body = over_socket(server, method, path, server.token)
        assert status == 401, body
    with api(server) as client:
        session_id = new_session(client)
        run = create_run(client, session_id, "token\nwait-for go\nanswer done", package="probe")
        run_token = wait_file(client, run["id"], "token").decode()
        try:
            status, body = over_socket(server, "POST", "/jobs/list_task_ids", run_token)
            assert status == 200 and json.loads(body)["success"] is True
            status, body = over_socket(server, "GET", f"/api/v1/sessions/{session_id}", run_token)
            assert status == 200 and json.loads(body)["id"] == session_id
        finally:
            (server.workspace / "agent" / "session-state" / session_id / "go").touch()
            assert wait_run(client, run["id"])["state"] == "succeeded"


def test_socket_is_the_server_users_alone(server: ServerProcess) -> None:
    info = socket_path(server).lstat()
    assert stat.S_ISSOCK(info.st_mode)
    assert (info.st_uid, info.st_gid) == (os.getuid(), os.getgid())
    assert stat.S_IMODE(info.st_mode) == 0o600


def connect_as(uid: int, gid: int, path: Path) -> subprocess.CompletedProcess[str]:
    """Try to connect to ``path`` as another user (needs root and setpriv)."""
    code = "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])"
    argv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
            sys.executable, "-c", code, str(path)]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


@pytest.mark.skipif(os.geteuid() != 0, reason="owning the socket by another uid needs root")
def test_socket_belongs_to_the_run_user_and_no_one_else(tmp_path: Path) -> None:
    # a workspace path too long for a socket puts it in /tmp/runyard-<hash>/, which any
    # user can traverse: only the socket's own owner and mode keep a stranger out
    root = tmp_path / ("d" * 90)
    srv = agent_server(root, "none", agent_run_uid=NOBODY, agent_run_gid=NOBODY)
    try:
        path = socket_path(srv)
        assert str(path).startswith(tempfile.gettempdir() + "/runyard-")
        info = path.lstat()
        assert (info.st_uid, info.st_gid) == (NOBODY, NOBODY)
        assert stat.S_IMODE(info.st_mode) == 0o660
        assert connect_as(NOBODY, NOBODY, path).returncode == 0
        stranger = connect_as(12345, 12345, path)
        assert stranger.returncode != 0 and "PermissionError" in stranger.stderr
    finally:
        srv.stop()


def test_a_stopped_server_leaves_no_socket_behind(tmp_path: Path) -> None:
    # a workspace path too long for a socket puts it in /tmp/runyard-<hash>/: a server that
    # left it there at its stop left one folder in /tmp for every workspace it served
    short = Path(tempfile.mkdtemp(prefix="ry-"))  # short enough for the socket inside
    try:
        for root in (short, tmp_path / ("d" * 90)):
            srv = agent_server(root, "none")
            path = socket_path(srv)
            inside = path.parent == srv.workspace / "agent" / "sock"
            assert inside == (root is short)
            try:
                assert stat.S_ISSOCK(path.lstat().st_mode)
            finally:
                srv.stop()
            assert not path.exists() and not path.is_symlink()
            assert path.parent.is_dir() if inside else not path.parent.exists()
    finally:
        shutil.rmtree(short)


def test_a_stopping_server_removes_only_its_own_socket(tmp_path: Path) -> None:
    srv = agent_server(tmp_path / ("d" * 90), "none")
    path = socket_path(srv)
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        path.unlink()
        other.bind(str(path))  # say, a server started since on the same workspace
    finally:
        srv.stop()
    try:
        assert stat.S_ISSOCK(path.lstat().st_mode) and path.parent.is_dir()
    finally:
        other.close()
        path.unlink()
        path.parent.rmdir()


def serve_until_it_ends(root: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "runyard", "serve", "--host", "127.0.0.1", "--port", "0",
            "--workspace-dir", str(root / "ws"), "--log-dir", str(root / "logs")]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    return subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=90)


@pytest.mark.parametrize("made", ["open to all", "a symlink", "another user's"])
def test_a_socket_folder_made_first_by_someone_else_is_refused(tmp_path: Path, made: str) -> None:
    # /tmp/runyard-<hash>/ is named after the workspace's path: anyone can make it first,
    # then swap the socket for theirs and collect the tokens the runs send it
    if made == "another user's" and os.geteuid() != 0:
        pytest.skip("making a folder another user owns needs root")
    root = tmp_path / ("d" * 90)
    root.mkdir()
    folder = AgentLayout(root / "ws" / "agent", root / "logs").socket_path().parent
    target = tmp_path / "theirs"
    target.mkdir()
    try:
        if made == "a symlink":
            folder.symlink_to(target)
        else:
            folder.mkdir()
            os.chmod(folder, 0o777 if made == "open to all" else 0o755)
            if made == "another user's":
                os.chown(folder, NOBODY, NOBODY)
        ended = serve_until_it_ends(root)
        assert ended.returncode != 0
        assert f"The agent socket's folder {folder} is not a folder of this user's alone" in (
            ended.stdout + ended.stderr
        )
        assert list(target.iterdir()) == [] and not (folder / "api.sock").exists()
    finally:
        if folder.is_symlink():
            folder.unlink()
        else:
            with contextlib.suppress(FileNotFoundError):
                for entry in folder.iterdir():
                    entry.unlink()
            folder.rmdir()
