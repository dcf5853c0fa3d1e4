"""What a web page (CSRF) or a rebound DNS name could send is refused, token or not:
a foreign Host or Origin is 403, a state change that is not JSON is 415, and nothing is
created. Configured ``allowed_hosts`` and ``allowed_origins`` are let in, and only those
origins get CORS answers."""

from __future__ import annotations

import json
import shutil
import subprocess
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


def test_bodyless_state_changes_need_no_content_type(srv: ServerProcess) -> None:
    """``curl -X POST .../close``: no body, no content type, the token only. httpx sends
    ``Content-Length: 0`` on a POST and no length at all on a DELETE; both pass."""
    with srv.client() as client:
        session_id = client.post("/api/v1/sessions", json={"title": "t"}).json()["id"]
        closed = client.post(f"/api/v1/sessions/{session_id}/close")
        assert "content-type" not in closed.request.headers
        assert closed.status_code == 200 and closed.json()["status"] == "CLOSED", closed.text
        reopened = client.post(f"/api/v1/sessions/{session_id}/reopen")
        assert reopened.status_code == 200 and reopened.json()["status"] == "OPEN"
        assert client.post("/api/v1/runs/run-nope/cancel").status_code == 404
        deleted = client.delete("/api/v1/mount-grants/grant-nope")
        assert "content-length" not in deleted.request.headers
        assert deleted.status_code == 404, deleted.text
        json_type = {"content-type": "application/json"}
        closed = client.post(f"/api/v1/sessions/{session_id}/close", headers=json_type)
        assert closed.status_code == 200 and closed.json()["status"] == "CLOSED"
        vendor = {"content-type": "application/vnd.api+json"}
        assert client.post(f"/api/v1/sessions/{session_id}/reopen", headers=vendor).is_success


def test_a_declared_type_is_held_to_json_even_without_a_body(srv: ServerProcess) -> None:
    """A type a bodyless request declares is checked as a body's would be (the routes that
    read an optional body check it too): ``curl -d ''`` sends a form type, and is 415."""
    with srv.client() as client:
        session_id = client.post("/api/v1/sessions", json={"title": "t"}).json()["id"]
        for method, path in [
            ("POST", f"/api/v1/sessions/{session_id}/close"),
            ("POST", "/api/v1/runs/run-nope/cancel"),
            ("DELETE", "/api/v1/mount-grants/grant-nope"),
            ("POST", "/jobs/list_task_ids"),
        ]:
            for content_type in ("text/plain", "application/x-www-form-urlencoded"):
                headers = {"content-type": content_type}
                refused = client.request(method, path, headers=headers)
                assert refused.status_code == 415, (method, path, refused.text)
        assert client.get(f"/api/v1/sessions/{session_id}").json()["status"] == "OPEN"


def test_curl_closes_and_reopens_a_session_with_the_token_only(srv: ServerProcess) -> None:
    """The real ``curl -X POST`` as the seed documents it: no body, no content type."""
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("no curl on this machine")
    with srv.client() as client:
        session_id = client.post("/api/v1/sessions", json={"title": "t"}).json()["id"]
    auth = ["-H", f"Authorization: Bearer {srv.token}"] if srv.token else []
    for action, status in [("close", "CLOSED"), ("reopen", "OPEN")]:
        url = f"{srv.url}/api/v1/sessions/{session_id}/{action}"
        done = subprocess.run(
            [curl, "-sS", "-X", "POST", *auth, "-w", "\n%{http_code}", url],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        body, code = done.stdout.rsplit("\n", 1)
        assert code == "200", done.stdout
        assert json.loads(body)["status"] == status


def test_a_body_still_needs_its_type(srv: ServerProcess) -> None:
    """Bodyless means no body by the request's framing: a body sent chunked (even an empty
    one) or with a length needs JSON, on the routes that read none too."""
    with srv.client() as client:
        session_id = client.post("/api/v1/sessions", json={"title": "t"}).json()["id"]
        close = f"/api/v1/sessions/{session_id}/close"
        for content in (iter([b'{"arguments": {}}']), iter([]), b"{}"):
            refused = client.post(close, content=content)
            assert "content-type" not in refused.request.headers
            assert refused.status_code == 415, refused.text
            assert refused.json()["error"]["code"] == "unsupported_media_type"
        chunked = client.post("/jobs/submit", content=iter([json.dumps(SUBMIT).encode()]))
        assert chunked.request.headers["transfer-encoding"] == "chunked"
        assert chunked.status_code == 415
        plain = {"content-type": "text/plain"}
        assert client.post(close, content=b"{}", headers=plain).status_code == 415
        assert client.get(f"/api/v1/sessions/{session_id}").json()["status"] == "OPEN"
    assert "pwned" not in " ".join(srv.call("list_task_ids")["answer"])


@pytest.mark.parametrize("site", ["cross-site", "same-site", "Cross-Site", "bogus", ""])
@pytest.mark.parametrize("origin", [None, "{url}"])
def test_cross_site_state_changes_are_refused(
    srv: ServerProcess, site: str, origin: str | None
) -> None:
    """What a browser says of a page's request cannot be forged by the page: anything but
    ``same-origin``/``none`` is refused, even beside an Origin that matches the Host."""
    with srv.client() as client:
        session_id = client.post("/api/v1/sessions", json={"title": "t"}).json()["id"]
        before = snapshot(srv)
        headers = {"sec-fetch-site": site}
        if origin is not None:
            headers["origin"] = origin.format(url=srv.url)
        for reply in (
            client.post(f"/api/v1/sessions/{session_id}/close", headers=headers),
            client.post("/api/v1/sessions", json={}, headers=headers),
            client.delete("/api/v1/mount-grants/grant-nope", headers=headers),
        ):
            assert reply.status_code == 403, reply.text
            assert reply.json()["error"]["code"] == "forbidden_origin"
        submitted = client.post("/jobs/submit", json=SUBMIT, headers=headers)
        assert submitted.status_code == 403 and "Sec-Fetch-Site" in submitted.json()["detail"]
        # reading is not a state change: a same-site page's GET is left to CORS
        assert client.get(f"/api/v1/sessions/{session_id}", headers=headers).status_code == 200
        assert client.get(f"/api/v1/sessions/{session_id}").json()["status"] == "OPEN"
    assert snapshot(srv) == before


@pytest.mark.parametrize("site", ["same-origin", "none", "SAME-ORIGIN"])
def test_a_browsers_own_requests_pass(srv: ServerProcess, site: str) -> None:
    with srv.client() as client:
        for headers in ({"sec-fetch-site": site}, {"sec-fetch-site": site, "origin": srv.url}):
            session = client.post("/api/v1/sessions", json={"title": "t"}, headers=headers)
            assert session.status_code == 201, session.text
            closed = client.post(f"/api/v1/sessions/{session.json()['id']}/close", headers=headers)
            assert closed.status_code == 200 and closed.json()["status"] == "CLOSED"


def test_a_same_origin_claim_does_not_excuse_a_foreign_origin(
    srv: ServerProcess, unchanged: None
) -> None:
    """Without ``Sec-Fetch-Site`` (an older browser) the Origin decides, and it decides
    with the header too: a foreign Origin is refused whatever the other header says."""
    with srv.client() as client:
        for site in (None, "same-origin", "none"):
            headers = {"origin": "http://evil.example"}
            if site is not None:
                headers["sec-fetch-site"] = site
            for reply in (
                client.post("/api/v1/sessions", json={}, headers=headers),
                client.post("/api/v1/sessions", headers=headers),  # bodyless: no type to stop it
            ):
                assert reply.status_code == 403, (site, reply.text)
                assert reply.json()["error"]["code"] == "forbidden_origin"


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
            # a trusted origin's page is cross-site by definition: its requests pass
            for site in ("cross-site", "same-site"):
                trusted = {**allowed, "sec-fetch-site": site}
                reply = client.post("/api/v1/sessions", json={}, headers=trusted)
                assert reply.status_code == 201, (site, reply.text)
            untrusted = {"origin": "https://other.example", "sec-fetch-site": "cross-site"}
            reply = client.post("/api/v1/sessions", json={}, headers=untrusted)
            assert reply.status_code == 403
            assert (
                client.post(
                    "/api/v1/sessions", json={}, headers={"sec-fetch-site": "cross-site"}
                ).status_code
                == 403
            )
            text = {**allowed, "content-type": "text/plain"}
            assert client.post("/jobs/submit", content=b"{}", headers=text).status_code == 415
    finally:
        server.stop()
