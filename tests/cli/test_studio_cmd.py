"""``runyard studio``: a fresh one-time Studio link, minted by the running server with the
token the CLI finds; the link holds a code, never the token."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from serverproc import ServerProcess, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("studio-cmd") / "srv")
    try:
        yield proc
    finally:
        proc.stop()


def studio(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``runyard studio`` with no RUNYARD_* variable but ``env``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    return subprocess.run(
        [sys.executable, "-m", "runyard", "studio", *args], cwd=cwd, env={**clean, **env},
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def redeem(srv: ServerProcess, code: str) -> httpx.Response:
    return httpx.post(srv.url + "/api/v1/login", json={"code": code}, timeout=30)


def test_it_prints_a_link_whose_code_signs_in_once(server: ServerProcess) -> None:
    done = studio(server.root, "--workspace-dir", str(server.workspace))
    assert done.returncode == 0, done.stderr
    found = re.fullmatch(rf"{re.escape(server.url)}/#login=([A-Za-z0-9_-]{{32,}})\n", done.stdout)
    assert found, done.stdout
    assert "one-time link, valid for 5 minutes" in done.stderr
    assert server.token and server.token not in done.stdout + done.stderr
    first = redeem(server, found.group(1))
    assert first.status_code == 200 and first.json()["token"] not in (None, server.token)
    assert redeem(server, found.group(1)).status_code == 401
    other = studio(server.root, "--workspace-dir", str(server.workspace))
    assert other.returncode == 0 and other.stdout != done.stdout  # a new code each time


def test_it_finds_the_workspace_from_inside_it(server: ServerProcess) -> None:
    done = studio(server.workspace)  # no option: the folder holds the server's server.json
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{server.url}/#login=")


def test_a_wrong_or_run_token_gets_no_link(server: ServerProcess) -> None:
    done = studio(server.root, "--url", server.url, "--token", "not-the-token")
    assert done.returncode == 2 and "refused the token" in done.stderr
    assert done.stdout == ""


def test_without_a_server_it_says_how_to_start_one(tmp_path: Path) -> None:
    (tmp_path / ".runyard").mkdir()
    done = studio(tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert "No runyard server is running" in done.stderr and "runyard serve" in done.stderr
    gone = studio(tmp_path, "--url", "http://127.0.0.1:9", "--token", "x")
    assert gone.returncode == 2 and "does not answer" in gone.stderr
