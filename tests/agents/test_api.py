"""The /api/v1 agent routes on a real server: records, real multipart uploads, grants,
runs, outputs, events, run tokens, and every bad input with its error."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from api_helpers import (
    agent_server,
    api,
    create_run,
    error_of,
    new_session,
    raw_upload,
    upload,
    wait_file,
    wait_run,
)

from serverproc import ServerProcess, read_sse

LIMIT = 1 << 20
JSON = {"content-type": "application/json"}  # bodies are JSON (a bodyless one may say so)


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("grants")
    (root / "allowed" / "data").mkdir(parents=True)
    (root / "allowed" / "data" / "shared.txt").write_text("shared\n")
    (root / "outside").mkdir()
    (root / "allowed" / "escape").symlink_to(root / "outside")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, roots: Path) -> Iterator[ServerProcess]:
    config = {"upload_max_bytes": LIMIT, "allowed_mount_roots": [str(roots / "allowed")]}
    srv = agent_server(tmp_path_factory.mktemp("api"), "auto", token="server-secret", **config)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with api(server) as made:
        yield made


def test_sessions_round_trip_close_and_reopen(client: httpx.Client) -> None:
    new_session(client, "older")
    session_id = new_session(client, "demo")
    got = client.get(f"/sessions/{session_id}").json()
    assert got["title"] == "demo" and got["status"] == "OPEN" and got["history"] == []
    assert set(got) == {
        "id", "title", "status", "history", "latestRunId", "createdAt", "updatedAt", "forkedFrom",
        "tag",
    }  # fmt: skip
    assert got["forkedFrom"] is None and got["tag"] is None
    listed = client.get("/sessions", params={"limit": 1}).json()
    assert listed["items"][0]["id"] == session_id and listed["nextCursor"]
    assert client.post(f"/sessions/{session_id}/close", headers=JSON).json()["status"] == "CLOSED"
    assert error_of(upload(client, session_id, b"x"), 409)["code"] == "session_closed"
    reply = client.post("/runs", json={"sessionId": session_id, "userPrompt": "hi"})
    assert "reopen" in error_of(reply, 409)["message"]
    assert client.post(f"/sessions/{session_id}/reopen", headers=JSON).json()["status"] == "OPEN"
    assert upload(client, session_id, b"x").status_code == 201
    assert error_of(client.get("/sessions/ses-nope"), 404)["code"] == "not_found"
    assert error_of(client.post("/sessions", json={"title": "a\x00b"}), 422)
    assert error_of(client.post("/sessions", json={"bogus": 1}), 422)
    assert error_of(client.get("/sessions", params={"cursor": "zz"}), 400)
    reply = client.post(
        "/sessions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert reply.status_code in (400, 422) and "error" in reply.json()


def test_upload_streams_records_and_downloads(client: httpx.Client, server: ServerProcess) -> None:
    session_id = new_session(client)
    data = os.urandom(LIMIT - 10)
    reply = upload(client, session_id, data, "prices.csv", "data/prices.csv")
    assert reply.status_code == 201, reply.text
    artifact = reply.json()
    assert artifact["size"] == len(data) and artifact["sha256"] == hashlib.sha256(data).hexdigest()
    assert artifact["relativePath"] == "data/prices.csv" and artifact["mediaType"] == "text/csv"
    content = client.get(f"/artifacts/{artifact['id']}/content")
    assert content.content == data and "prices.csv" in content.headers["content-disposition"]
    listed = client.get("/artifacts", params={"sessionId": session_id}).json()
    assert [a["id"] for a in listed["items"]] == [artifact["id"]] and listed["nextCursor"] is None
    dup = upload(client, session_id, b"x", "other.csv", "data/prices.csv")
    assert error_of(dup, 409)["code"] == "conflict"
    assert error_of(upload(client, session_id, b"x", "d.csv", "data"), 409)


@pytest.mark.parametrize(
    ("name", "relative_path", "rule"),
    [
        (b"../../etc/passwd", b"", "may not contain '/'"),
        (b"/etc/passwd", b"", "may not contain '/'"),
        (b"ok.csv", b"../escape.csv", "'..'"),
        (b"ok.csv", b"/abs/path.csv", "must be relative"),
        (b"a\x00b.csv", b"", "U+0000"),
        (b"ok.csv", b"dir/a\x01b", "U+0001"),
        (b"ok.csv", b"dir/a\x1b[31mred", "U+001B"),
        (b"x" * 300, b"", "255 bytes"),
        (b"ok.csv", b"d/" + b"y" * 300, "255 bytes"),
        (b"ok.csv", b"run-context.json", "reserved"),
    ],
)
def test_bad_names_are_refused_and_nothing_is_kept(
    client: httpx.Client, server: ServerProcess, name: bytes, relative_path: bytes, rule: str
) -> None:
    session_id = new_session(client)
    error = error_of(raw_upload(client, session_id, name, relative_path), 422)
    assert rule in error["message"]
    assert client.get("/artifacts", params={"sessionId": session_id}).json()["items"] == []
    assert _partials(server) == []


def _partials(server: ServerProcess) -> list[str]:
    return [
        p.name for p in (server.workspace / "agent" / "uploads").iterdir() if "partial" in p.name
    ]


def test_oversized_and_malformed_uploads(client: httpx.Client, server: ServerProcess) -> None:
    session_id = new_session(client)
    before = sorted(p.name for p in (server.workspace / "agent" / "uploads").iterdir())
    too_big = error_of(upload(client, session_id, b"z" * (LIMIT + 1)), 413)
    assert str(LIMIT) in too_big["message"] and too_big["code"] == "too_large"
    assert sorted(p.name for p in (server.workspace / "agent" / "uploads").iterdir()) == before
    assert error_of(upload(client, "ses-unknown", b"x"), 404)
    as_json = client.post("/artifacts/upload", json={"sessionId": session_id})
    assert error_of(as_json, 415)["code"] == "unsupported_media_type"
    no_file = client.post("/artifacts/upload", data={"sessionId": session_id}, files={"x": b""})
    assert error_of(no_file, 400)
    missing = client.post("/artifacts/upload", files={"file": ("a.csv", b"x")})
    assert "sessionId" in error_of(missing, 422)["message"]
    assert error_of(client.get("/artifacts"), 422)
    assert error_of(client.get("/artifacts/art-nope/content"), 404)


def test_mount_grants_only_inside_allowed_roots(client: httpx.Client, roots: Path) -> None:
    session_id = new_session(client)
    allowed = str(roots / "allowed" / "data")

    def grant(name: str, host_path: str, access: str = "ro") -> httpx.Response:
        body = {"sessionId": session_id, "name": name, "hostPath": host_path, "access": access}
        return client.post("/mount-grants", json=body)

    created = grant("data", allowed)
    assert created.status_code == 201 and created.json()["hostPath"] == allowed
    assert (
        "outside the allowed roots" in error_of(grant("o", str(roots / "outside")), 422)["message"]
    )
    via_link = error_of(grant("l", str(roots / "allowed" / "escape")), 422)["message"]
    assert "resolves to" in via_link and "outside" in via_link
    assert error_of(grant("dots", str(roots / "allowed" / ".." / "outside")), 422)
    assert error_of(grant("rel", "allowed/data"), 422)
    assert error_of(grant("missing", str(roots / "allowed" / "nope")), 422)
    assert error_of(grant("bad/name", allowed), 422)
    assert error_of(grant("w", allowed, "rwx"), 422)
    assert error_of(grant("data", allowed), 409)
    revoked = client.delete(f"/mount-grants/{created.json()['id']}", headers=JSON).json()
    assert revoked["revoked"] is True
    assert grant("data", allowed, "rw").status_code == 201
    listed = client.get("/mount-grants", params={"sessionId": session_id}).json()["items"]
    assert [(g["name"], g["access"], g["revoked"]) for g in listed] == [
        ("data", "rw", False), ("data", "ro", True),
    ]  # fmt: skip
    reply = client.post("/runs", json={
        "sessionId": session_id, "userPrompt": "x", "mountGrantIds": [revoked["id"]],
    })  # fmt: skip
    assert "revoked" in error_of(reply, 422)["message"]


def test_run_inputs_grants_outputs_and_events(client: httpx.Client, roots: Path) -> None:
    session_id = new_session(client)
    upload(client, session_id, b"a,b\n1,2\n", "prices.csv", "data/prices.csv")
    plain = upload(client, session_id, b"notes\n", "my notes.txt").json()
    ro = {"sessionId": session_id, "name": "shared", "access": "ro"}
    client.post("/mount-grants", json={**ro, "hostPath": str(roots / "allowed" / "data")})
    script = "\n".join([
        "read in/data/prices.csv", f"read in/{plain['id']}-my_notes.txt",
        "read mounts/shared/shared.txt", "write mounts/shared/new.txt x", "answer done",
    ])  # fmt: skip
    run = wait_run(client, create_run(client, session_id, script, package="probe")["id"])
    assert run["state"] == "succeeded", run
    probes = json.loads(client.get(f"/runs/{run['id']}/files/probes.json").content)
    found = [(r["ok"], r.get("value")) for r in probes["results"]]
    sandboxed = probes["context"]["envFacts"]["isolation"] == "bwrap"
    assert found[:3] == [(True, "a,b\n1,2\n"), (True, "notes\n"), (True, "shared\n")]
    assert found[3][0] is not sandboxed  # a read-only grant is enforced in the sandbox
    files = client.get(f"/runs/{run['id']}/files").json()
    assert {f["path"] for f in files["items"]} >= {"final-answer.md", "probes.json"}
    assert client.get(f"/runs/{run['id']}/files/final-answer.md").text == "done"
    for bad in ("../in/run-context.json", "%2e%2e/%2e%2e/state.db", "nope.txt"):
        assert client.get(f"/runs/{run['id']}/files/{bad}").status_code in (404, 422)
    _check_events(client, run["id"])


def _check_events(client: httpx.Client, run_id: str) -> None:
    with client.stream("GET", f"/runs/{run_id}/events") as reply:
        events = read_sse(reply.iter_lines())
    kinds = [e["event"] for e in events]
    states = [e["data"]["state"] for e in events if e["event"] == "state"]
    assert states == ["queued", "running", "succeeded"] and kinds[-1] == "end"
    assert "probe done" in "".join(e["data"]["content"] for e in events if e["event"] == "log")
    assert events[-1]["data"]["run"]["state"] == "succeeded"
    resume_from = events[1]["id"]
    headers = {"last-event-id": resume_from}
    with client.stream("GET", f"/runs/{run_id}/events", headers=headers) as reply:
        rest = read_sse(reply.iter_lines())
    assert [e["data"] for e in rest] == [e["data"] for e in events[2:]]
    assert error_of(client.get(f"/runs/{run_id}/events", headers={"last-event-id": "x"}), 400)


def test_run_refusals(client: httpx.Client) -> None:
    session_id, other = new_session(client), new_session(client)
    foreign = upload(client, other, b"x").json()
    cases = [
        ({"package": "no-such-package"}, 404, "package_not_found"),
        ({"package": "../probe"}, 422, "invalid"),
        ({"artifactIds": [foreign["id"]]}, 422, "invalid"),
        ({"artifactIds": ["art-missing"]}, 422, "invalid"),
        ({"userPrompt": ""}, 422, "invalid"),
        ({"sessionId": "ses-missing"}, 404, "not_found"),
        ({"unknownField": 1}, 422, "invalid"),
    ]
    for extra, status, code in cases:
        body = {"sessionId": session_id, "userPrompt": "answer x", **extra}
        assert error_of(client.post("/runs", json=body), status)["code"] == code, extra
    assert "probe" in error_of(client.post("/runs", json={
        "sessionId": session_id, "userPrompt": "x", "package": "nope"}), 404)["message"]  # fmt: skip
    first = create_run(client, session_id, "wait-for go\nanswer one", package="probe")
    again = client.post(
        "/runs", json={"sessionId": session_id, "userPrompt": "x", "package": "probe"}
    )
    assert error_of(again, 409)["code"] == "run_active"
    cancelled = client.post(f"/runs/{first['id']}/cancel", headers=JSON).json()
    assert cancelled["state"] == "cancelled" and cancelled["exitCode"] == 130
    assert error_of(client.get("/runs/run-missing"), 404)


def test_run_token_reaches_only_its_own_session(
    client: httpx.Client, server: ServerProcess
) -> None:
    other = new_session(client)
    session_id = new_session(client)
    script = "\n".join([
        f"api GET /api/v1/sessions/{session_id}", f"api GET /api/v1/sessions/{other}",
        "api GET /api/v1/runs", "token", "wait-for go", "answer scoped",
    ])  # fmt: skip
    run = create_run(client, session_id, script, package="probe")
    token = wait_file(client, run["id"], "token").decode()
    tcp = httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {token}"})
    with tcp:
        assert tcp.get(f"/api/v1/sessions/{session_id}").status_code == 200
        assert error_of(tcp.get(f"/api/v1/sessions/{other}"), 404)
        assert error_of(tcp.post("/api/v1/sessions", json={}), 403)
        listed = tcp.get("/api/v1/sessions").json()["items"]
        assert [s["id"] for s in listed] == [session_id]
        jobs = tcp.post("/jobs/list_task_ids", json={"arguments": {}})
        assert jobs.status_code == 200 and jobs.json()["success"]
        (server.workspace / "agent" / "session-state" / session_id / "go").touch()
        assert wait_run(client, run["id"])["state"] == "succeeded"
        assert tcp.get(f"/api/v1/sessions/{session_id}").status_code == 401
    probes = json.loads(client.get(f"/runs/{run['id']}/files/probes.json").content)
    own, foreign, runs = (r["value"] for r in probes["results"])
    assert own[0] == 200 and own[1]["id"] == session_id
    assert foreign[0] == 404
    assert {r["sessionId"] for r in runs[1]["items"]} == {session_id}
    anonymous = httpx.get(server.url + "/api/v1/sessions")
    assert anonymous.status_code == 401
