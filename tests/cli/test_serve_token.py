"""The server token: kept in server.json across restarts, new with ``--rotate-token``, given
by ``--token-file`` or ``RUNYARD_TOKEN``; ``--token`` still works, with a warning."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from serverproc import ServerProcess, start_server

WARNING = "warning: --token on the command line can be read by other local users"


def recorded(srv: ServerProcess) -> dict[str, object]:
    return json.loads((srv.workspace / "server.json").read_text())  # type: ignore[no-any-return]


def serve_refused(tmp_path: Path, *options: str, env: dict[str, str] | None = None) -> str:
    """``runyard serve OPTIONS`` that must exit at once: its stderr."""
    argv = [sys.executable, "-m", "runyard", "serve", "--port", "0",
            "--workspace-dir", str(tmp_path / "ws"), "--log-dir", str(tmp_path / "logs"),
            *options]  # fmt: skip
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, cwd=tmp_path, env={**clean, **(env or {})}
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    return done.stderr


def test_a_restart_keeps_the_token_and_rotate_token_makes_a_new_one(tmp_path: Path) -> None:
    first = start_server(tmp_path)
    token = first.token
    assert token and first.stop() == 0
    assert recorded(first) == {"token": token}  # no address of a stopped server, the token
    again = start_server(tmp_path)
    assert again.token == token
    assert again.call("list_task_ids")["success"] is True
    again.stop(signal.SIGKILL)  # a server that could not clean up: its record still holds it
    after_kill = start_server(tmp_path)
    assert after_kill.token == token
    after_kill.stop()
    rotated = start_server(tmp_path, args=["--rotate-token"])
    try:
        assert rotated.token and rotated.token != token and len(rotated.token) >= 32
        old = httpx.post(rotated.url + "/jobs/list_task_ids", json={"arguments": {}},
                         headers={"authorization": f"Bearer {token}"}, timeout=30)  # fmt: skip
        assert old.status_code == 401  # the old token opens nothing any more
        assert rotated.call("list_task_ids")["success"] is True
    finally:
        rotated.stop()
    assert recorded(rotated) == {"token": rotated.token}
    kept = start_server(tmp_path)
    try:
        assert kept.token == rotated.token
    finally:
        kept.stop()


def test_a_damaged_record_gives_a_new_token_not_an_odd_one(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    for content in ('{"token": "has spaces in it"}', '{"token": 5}', "not json", '{"token": ""}'):
        (tmp_path / "ws" / "server.json").write_text(content)
        srv = start_server(tmp_path)
        try:
            assert srv.token and re.fullmatch(r"[A-Za-z0-9_-]{32,}", srv.token), content
        finally:
            srv.stop()


def test_token_on_the_command_line_works_with_a_warning(tmp_path: Path) -> None:
    secret = "command-line-token-9c2e"
    srv = start_server(tmp_path, args=["--token", secret])
    try:
        said = "".join(srv.output)
        assert WARNING in said and "--token-file PATH or RUNYARD_TOKEN" in said
        assert secret not in said  # neither the warning nor the banner repeats it
        assert srv.token == secret and srv.call("list_task_ids")["success"] is True
    finally:
        srv.stop()


def test_token_file_and_environment_give_the_token_without_a_warning(tmp_path: Path) -> None:
    by_file = start_server(tmp_path / "file", token="from-a-file-3b1d")  # --token-file
    try:
        assert WARNING not in "".join(by_file.output)
        assert by_file.token == "from-a-file-3b1d" == recorded(by_file)["token"]
        assert by_file.call("list_task_ids")["success"] is True
        wrong = httpx.get(by_file.url + "/jobs", headers={"authorization": "Bearer x"})
        assert wrong.status_code == 401
    finally:
        by_file.stop()
    by_env = start_server(tmp_path / "env", env={"RUNYARD_TOKEN": "from-the-env-77aa"})
    try:
        assert WARNING not in "".join(by_env.output)
        assert by_env.token == "from-the-env-77aa"
    finally:
        by_env.stop()


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("", "expected one line holding the token"),
        ("\n\n", "expected one line holding the token"),
        ("one\ntwo\n", "expected one line holding the token"),
        ("with space\n", "expected one line holding the token"),
        ("x" * 5000, "longer than 4096 bytes"),
    ],
)
def test_a_token_file_that_holds_no_token_is_refused(
    tmp_path: Path, content: str, said: str
) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    error = serve_refused(tmp_path, "--token-file", str(path))
    assert said in error and str(path) in error
    assert not (tmp_path / "ws" / "server.json").exists()


def test_conflicting_token_options_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("abc\n")
    missing = serve_refused(tmp_path, "--token-file", str(tmp_path / "missing"))
    assert "No such file or directory" in missing
    both = serve_refused(tmp_path, "--token", "abc", "--token-file", str(path))
    assert "give one of them" in both
    rotate = serve_refused(tmp_path, "--rotate-token", "--token-file", str(path))
    assert "--rotate-token makes a new token, but a token is configured" in rotate
    rotate_env = serve_refused(tmp_path, "--rotate-token", env={"RUNYARD_TOKEN": "abc"})
    assert "a token is configured" in rotate_env
    no_auth = serve_refused(tmp_path, "--rotate-token", "--no-auth")
    assert "--no-auth serves without one" in no_auth
