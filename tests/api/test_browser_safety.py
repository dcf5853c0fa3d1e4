"""What a web page (CSRF) or a rebound DNS name could send is refused, token or not:
a foreign Host or Origin is 403, a state change that is not JSON is 415, and nothing is
created. Configured ``allowed_hosts`` and ``allowed_origins`` are let in, and only those
origins get CORS answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from serverproc import ServerProcess, start_server

SUBMIT = {"arguments": {"task": "command", "task_name": "pwned", "command": "id"}}


@pytest.fixture(scope="module", params=["token", "no-auth"])
def srv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
    ServerProcess
]:  # fmt: skip
    server = start_server(tmp_path_factory.mktemp("guard"), auth=request.param == "token")
    try:
        yield server
    finally:
        server.stop()


def snapshot(server: ServerProcess) -> tuple[list[str], list[str], list[str]]:
    """Task ids, task folders and session ids: what a refused request must not add to."""
    base = server.workspace / "base"
    folders = sorted(p.name for p in base.iterdir()) if base.exists() else []
    with server.client() as client:
        sessions = client.get("/api/v1/sessions", params={"limit": 1000}).json()["items"]
    return sorted(server.call("list_task_ids")["answer"]), folders, [s["id"] for s in sessions]


@pytest.fixture
def unchanged(srv: ServerProcess) -> Iterator[None]:
    before = snapshot(srv)
    yield
    assert snapshot(srv) == before


def port_of(server: ServerProcess) -> str:
    return server.url.rsplit(":", 1)[1]


@pytest.mark.parametrize(
    "host",
    ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example:{port}", "localhost.:{port}",
     "", "127.0.0.1:{port}, evil.example", "[::1"],
)  # fmt: skip
def test_foreign_host_is_refused(srv: ServerProcess, unchanged: None, host: str) -> None:
    headers = {**srv.headers, "host": host.format(port=port_of(srv))}
    with srv.client() as client:
        submitted = client.post("/jobs/submit", json=SUBMIT, headers=headers)
        assert submitted.status_code == 403 and "detail" in submitted.json()
        session = client.post("/api/v1/sessions", json={}, headers=headers)
        assert session.status_code == 403 and session.json()["error"]["code"] == "forbidden_host"
        # rebinding reads too: a page on a rebound name sees nothing either
        assert client.post("/jobs/list_task_ids", json={}, headers=headers).status_code == 403
        assert client.get("/", headers=headers).status_code == 403


@pytest.mark.parametrize("host", ["localhost:{port}", "127.0.0.1:{port}", "[::1]:{port}",
                                  "LOCALHOST:9000", "127.0.0.1"])  # fmt: skip
def test_own_names_are_accepted(srv: ServerProcess, host: str) -> None:
    headers = {**srv.headers, "host": host.format(port=port_of(srv))}
    with srv.client() as client:
        reply = client.post("/jobs/list_task_ids", json={"arguments": {}}, headers=headers)
    assert reply.status_code == 200 and reply.json()["success"] is True


@pytest.mark.parametrize(
    "origin", ["http://evil.example", "null", "http://127.0.0.1:1", "https://evil.example",
               "http://localhost:{port}.evil.example", "file://"],
)  # fmt: skip
def test_foreign_origin_is_refused(srv: ServerProcess, unchanged: None, origin: str) -> None:
    headers = {**srv.headers, "origin": origin.format(port=port_of(srv))}
    with srv.client() as client:
        submitted = client.post("/jobs/submit", json=SUBMIT, headers=headers)
        assert submitted.status_code == 403 and "origin" in submitted.json()["detail"].lower()
        session = client.post("/api/v1/sessions", json={}, headers=headers)
        assert session.json()["error"]["code"] == "forbidden_origin"
        preflight = client.options(
            "/jobs/submit",
            headers={"origin": headers["origin"], "access-control-request-method": "POST"},
        )
        assert preflight.status_code == 403
        assert "access-control-allow-origin" not in preflight.headers


def test_own_origin_is_accepted_without_cors(srv: ServerProcess) -> None:
    headers = {**srv.headers, "origin": srv.url}
    with srv.client() as client:
        reply = client.post("/jobs/list_task_ids", json={"arguments": {}}, headers=headers)
    assert reply.status_code == 200
    assert "access-control-allow-origin" not in reply.headers


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain", json.dumps(SUBMIT)),
        ("text/plain;charset=UTF-8", json.dumps(SUBMIT)),
        ("application/x-www-form-urlencoded", json.dumps(SUBMIT)),
        ("multipart/form-data; boundary=x", "--x\r\n\r\n" + json.dumps(SUBMIT) + "\r\n--x--"),
        (None, json.dumps(SUBMIT)),
        ("application/jsonp", json.dumps(SUBMIT)),
        ("text/json", json.dumps(SUBMIT)),
    ],
)
def test_state_changes_take_json_only(
    srv: ServerProcess, unchanged: None, content_type: str | None, body: str
) -> None:
    headers = dict(srv.headers)
    if content_type is not None:
        headers["content-type"] = content_type
    with srv.client() as client:
        submitted = client.post("/jobs/submit", content=body, headers=headers)
        assert submitted.status_code == 415, submitted.text
        assert "detail" in submitted.json()
        session = client.post("/api/v1/sessions", content=b"{}", headers=headers)
        assert session.status_code == 415
        assert session.json()["error"]["code"] == "unsupported_media_type"


def test_bodyless_state_changes_need_a_json_content_type(srv: ServerProcess) -> None:
    with srv.client() as client:
        session_id = client.post("/api/v1/sessions", json={"title": "t"}).json()["id"]
        for method, path in [
            ("POST", f"/api/v1/sessions/{session_id}/close"),
            ("POST", "/api/v1/runs/run-nope/cancel"),
            ("DELETE", "/api/v1/mount-grants/grant-nope"),
        ]:
            for content_type in (None, "text/plain"):
                headers = {"content-type": content_type} if content_type else {}
                refused = client.request(method, path, headers=headers)
                assert refused.status_code == 415, (method, path, refused.text)
        assert client.get(f"/api/v1/sessions/{session_id}").json()["status"] == "OPEN"
        json_type = {"content-type": "application/json"}
        closed = client.post(f"/api/v1/sessions/{session_id}/close", headers=json_type)
        assert closed.status_code == 200 and closed.json()["status"] == "CLOSED"
        assert client.post("/api/v1/runs/run-nope/cancel", headers=json_type).status_code == 404
        vendor = {"content-type": "application/vnd.api+json"}
        assert client.post(f"/api/v1/sessions/{session_id}/reopen", headers=vendor).is_success


def test_uploads_take_multipart_only(srv: ServerProcess) -> None:
    with srv.client() as client:
        session_id = client.post("/api/v1/sessions", json={}).json()["id"]
        for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {"content-type": content_type} if content_type else {}
            refused = client.post("/api/v1/artifacts/upload", content=b"x", headers=headers)
            assert refused.status_code == 415
        files = {"file": ("a.csv", b"a,b\n")}
        ok = client.post("/api/v1/artifacts/upload", data={"sessionId": session_id}, files=files)
        assert ok.status_code == 201, ok.text
        assert client.get("/api/v1/artifacts", params={"sessionId": session_id}).json()["items"]


def test_allowed_hosts_and_origins(tmp_path: Path) -> None:
    config = {
        "allowed_hosts": ["runyard.example", "proxy.example:8443"],
        "allowed_origins": ["https://app.example"],
    }
    server = start_server(tmp_path / "allowed", config=config)
    try:
        with server.client() as client:
            call = {"arguments": {}}
            for host, status in [("runyard.example", 200), ("runyard.example:1234", 200),
                                 ("proxy.example:8443", 200), ("proxy.example", 403),
                                 ("proxy.example:80", 403), ("other.example", 403)]:  # fmt: skip
                reply = client.post("/jobs/list_task_ids", json=call, headers={"host": host})
                assert reply.status_code == status, host
            allowed = {"origin": "https://app.example"}
            reply = client.post("/jobs/list_task_ids", json=call, headers=allowed)
            assert reply.status_code == 200
            assert reply.headers["access-control-allow-origin"] == "https://app.example"
            preflight = client.options(
                "/jobs/submit",
                headers={**allowed, "access-control-request-method": "POST",
                         "access-control-request-headers": "authorization, content-type"},
            )  # fmt: skip
            assert preflight.status_code == 200
            assert preflight.headers["access-control-allow-origin"] == "https://app.example"
            other = {"origin": "https://other.example", "access-control-request-method": "POST"}
            assert client.options("/jobs/submit", headers=other).status_code == 403
            text = {**allowed, "content-type": "text/plain"}
            assert client.post("/jobs/submit", content=b"{}", headers=text).status_code == 415
    finally:
        server.stop()
