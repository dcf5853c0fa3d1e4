"""The Studio's sign-in over a real server: one-time login codes, traded for a browser
session token; the server token itself never goes to a browser."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from runyard.api.login import BrowserSessions, LoginCodes
from serverproc import ServerProcess, start_server

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run  # noqa: E402

SPENT = "expired or was already used: run `runyard studio` for a new one"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("login") / "srv")
    try:
        yield srv
    finally:
        srv.stop()


def mint(srv: ServerProcess, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(
        srv.url + "/api/v1/login/codes", headers=srv.headers if headers is None else headers,
        json={}, timeout=30,
    )  # fmt: skip


def redeem(srv: ServerProcess, code: object, **headers: str) -> httpx.Response:
    return httpx.post(srv.url + "/api/v1/login", json={"code": code}, headers=headers, timeout=30)


def signed_in(srv: ServerProcess, token: str) -> int:
    reply = httpx.post(
        srv.url + "/jobs/list_task_ids", json={"arguments": {}},
        headers={"authorization": f"Bearer {token}"}, timeout=30,
    )  # fmt: skip
    return reply.status_code


def test_the_banner_link_holds_a_code_that_works_once(server: ServerProcess) -> None:
    said = "".join(server.output)
    assert server.token and server.token not in said  # the banner never shows the token
    found = re.search(r"Studio: (http://\S+/)#login=(\S+)", said)
    assert found and found.group(1) == server.url + "/", said
    first = redeem(server, found.group(2))
    assert first.status_code == 200, first.text
    assert first.headers["cache-control"] == "no-store"
    session = first.json()["token"]
    assert session and session != server.token and server.token not in first.text
    assert signed_in(server, session) == 200  # a browser session opens what the admin may
    again = redeem(server, found.group(2))
    assert again.status_code == 401 and SPENT in again.json()["detail"]
    assert again.headers["www-authenticate"] == "Bearer"


def test_a_minted_code_works_once_and_its_lookalikes_never(server: ServerProcess) -> None:
    reply = mint(server)
    assert reply.status_code == 200 and reply.headers["cache-control"] == "no-store"
    code = reply.json()["code"]
    assert reply.json()["expiresInSeconds"] == 300 and len(code) >= 32
    lookalikes = [code[:-1], code + "A", code.upper(), code[:16], " " + code, code * 3]
    for guess in [*lookalikes, "", "x" * 100_000]:
        refused = redeem(server, guess)
        assert refused.status_code in (401, 413), (guess[:40], refused.text)
    assert redeem(server, code).status_code == 200  # the guesses spent nothing of it
    assert redeem(server, code).status_code == 401


def test_many_wrong_codes_neither_grow_nor_lock_the_store(server: ServerProcess) -> None:
    code = mint(server).json()["code"]
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for n in range(200):
            reply = client.post("/api/v1/login", json={"code": f"guess-{n:04d}-{'x' * 24}"})
            assert reply.status_code == 401
    assert redeem(server, code).status_code == 200


@pytest.mark.parametrize(
    "body",
    [{}, {"code": 5}, {"code": None}, {"code": ["a"]}, {"code": "a", "token": "b"}, []],
)
def test_a_malformed_exchange_is_a_clear_400(server: ServerProcess, body: object) -> None:
    reply = httpx.post(server.url + "/api/v1/login", json=body, timeout=30)
    assert reply.status_code == 400, reply.text
    assert "code" in reply.json()["error"]["message"]


def test_a_page_of_another_site_cannot_exchange_a_code(server: ServerProcess) -> None:
    code = mint(server).json()["code"]
    for headers in (
        {"sec-fetch-site": "cross-site", "origin": "https://evil.example"},
        {"origin": "https://evil.example"},
        {"host": "evil.example"},
    ):
        assert redeem(server, code, **headers).status_code == 403
    form = httpx.post(server.url + "/api/v1/login", data={"code": code}, timeout=30)
    assert form.status_code == 415  # a form post, as a page could send without CORS
    assert redeem(server, code).status_code == 200  # none of those spent it


def test_only_the_admin_mints_codes(server: ServerProcess) -> None:
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "Basic x"}):
        assert mint(server, headers).status_code == 401
    session = redeem(server, mint(server).json()["code"]).json()["token"]
    as_session = {"authorization": f"Bearer {session}"}
    assert mint(server, as_session).status_code == 200  # a signed-in tab may sign in another


def test_logout_ends_the_browser_session_only(server: ServerProcess) -> None:
    session = redeem(server, mint(server).json()["code"]).json()["token"]
    headers = {"authorization": f"Bearer {session}"}
    reply = httpx.post(server.url + "/api/v1/logout", headers=headers, json={}, timeout=30)
    assert reply.status_code == 200 and reply.json() == {"ended": True}
    assert signed_in(server, session) == 401
    admin = httpx.post(server.url + "/api/v1/logout", headers=server.headers, json={}, timeout=30)
    assert admin.json() == {"ended": False}
    assert server.token and signed_in(server, server.token) == 200


def test_an_expired_code_is_refused(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "srv", config={"login_link_seconds": 1})
    try:
        assert "one-time link, for 1 second;" in "".join(srv.output)
        code = mint(srv).json()["code"]
        time.sleep(1.3)
        reply = redeem(srv, code)
        assert reply.status_code == 401 and SPENT in reply.json()["detail"]
        fresh = mint(srv).json()["code"]
        assert redeem(srv, fresh).status_code == 200
    finally:
        srv.stop()


def test_without_auth_there_is_no_code_and_no_token(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "srv", auth=False)
    try:
        assert f"Studio: {srv.url}/\n" in "".join(srv.output)
        assert mint(srv, {}).json()["code"] is None
    finally:
        srv.stop()


def test_a_run_token_can_neither_mint_nor_end_sessions(tmp_path: Path) -> None:
    """Over the agent socket and over TCP alike: a run token is no admin."""
    srv = agent_server(tmp_path / "srv", "none")
    try:
        with api(srv, timeout=120) as client:
            session_id = new_session(client)
            calls = [
                ["mint", "POST", "/api/v1/login/codes", {}],
                ["logout", "POST", "/api/v1/logout", {}],
                ["hold", "GET", "release", None],
            ]
            run = create_run(client, session_id, json.dumps(calls), package="scope_probe")
            run_token = wait_file(client, run["id"], "token").decode()
            try:
                as_run = {"authorization": f"Bearer {run_token}"}
                over_tcp = mint(srv, as_run)
                assert over_tcp.status_code == 403, over_tcp.text
                assert "admin" in over_tcp.json()["error"]["message"]
                assert "code" not in over_tcp.json()
            finally:
                (srv.workspace / "agent" / "session-state" / session_id / "release").touch()
            assert wait_run(client, run["id"], timeout=90)["state"] == "succeeded"
            replies = json.loads(client.get(f"/runs/{run['id']}/files/replies.json").content)
        assert replies["mint"]["status"] == 403, replies
        assert replies["logout"]["status"] == 403, replies
    finally:
        srv.stop()


def test_the_stores_are_bounded_and_spend_codes() -> None:
    now = [0.0]
    codes = LoginCodes(ttl_seconds=60, capacity=4, clock=lambda: now[0])
    minted = [codes.issue() for _ in range(6)]
    assert len(codes) == 4  # the oldest gave way
    assert not codes.redeem(minted[0]) and not codes.redeem(minted[1])
    assert codes.redeem(minted[5]) and not codes.redeem(minted[5])
    for n in range(100):
        assert not codes.redeem(f"unknown-{n}")
    assert len(codes) == 3  # refusals add nothing
    now[0] = 61.0
    assert not codes.redeem(minted[4])  # expired
    assert len(codes) == 0
    sessions = BrowserSessions(ttl_seconds=10, capacity=2, clock=lambda: now[0])
    token = sessions.issue()
    assert sessions.valid(token) and sessions.valid(token)  # a session is not spent by use
    now[0] += 11
    assert not sessions.valid(token)
