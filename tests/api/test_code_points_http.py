"""A lone surrogate or bytes that are not UTF-8 in a request body answer 422 on every route
that reads one, wherever they sit (a value, a key, deep inside), and nothing is written.

One real server on 127.0.0.1 with a session. Python's ``json`` reads ``"\\ud800"`` into a
``str`` no UTF-8 encoder takes: SQLite refused it at insert and the error log at write,
which answered 500 on the Job API's routes and on ``/api/v1/runs``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from serverproc import ServerProcess, start_server

JSON = {"content-type": "application/json"}
LONE = ("\\ud800", "\\udfff", "\\uDBFF", "x\\udc00y", "\\udc00\\ud800")
# bytes: an encoded surrogate (which json.loads alone would take), a stray byte, an overlong
RAW = (b"\xed\xa0\x80", b"\xff", b"\xc0\xaf")


@dataclass
class World:
    srv: ServerProcess
    session_id: str
    task_id: str
    allowed: Path

    def client(self) -> httpx.Client:
        return self.srv.client(60.0)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("code-points") / "srv"
    allowed = root.parent / "mounts"
    (allowed / "data").mkdir(parents=True)
    config = {"allowed_mount_roots": [str(allowed)]}
    srv = start_server(root, token="code-points-token", config=config)
    try:
        submitted = srv.call("submit", task="demo", x=1, y=2, task_name="cp")["answer"]
        srv.call("wait_task", task_id=submitted["task_id"], run_id=submitted["run_id"])
        with srv.client() as client:
            session_id = client.post("/api/v1/sessions", json={"title": "t"}).json()["id"]
        yield World(srv, session_id, submitted["task_id"], allowed)
    finally:
        srv.stop()


def _texts() -> list[str]:
    """JSON texts for a Job route with ``BAD`` where the bad string content goes: a value, a
    key, deep in arguments, and in the envelope itself."""
    return [
        '{"arguments": {"task": "BAD", "task_id": "BAD", "x": 1, "y": 2}}',
        '{"arguments": {"BAD": 1}}',
        '{"arguments": {"task": "demo", "x": 1, "y": 2, "n": {"a": [[{"b": ["BAD"]}]]}}}',
        '{"arguments": {"task_ids": ["base#demo#BAD"], "k": {"BAD": null}}}',
        '{"arguments": {}, "target": "BAD"}',
        '{"BAD": {}}',
    ]


def _job_bodies() -> list[bytes]:
    bodies = [text.replace("BAD", bad).encode() for bad in LONE for text in _texts()]
    return bodies + [text.encode().replace(b"BAD", raw) for raw in RAW for text in _texts()]


def _post(client: httpx.Client, route: str, body: bytes) -> httpx.Response | str:
    try:
        return client.post(route, content=body, headers=JSON)
    except httpx.TransportError as exc:  # how a 500 here used to end: a dropped connection
        return f"no answer: {exc!r}"


def _snapshot(world: World) -> dict[str, Any]:
    """What a refused request must leave as it was: task folders and the agent records."""
    base = world.srv.workspace / "base"
    with world.client() as client:
        lists = {
            name: client.get(f"/api/v1/{name}", params={"sessionId": world.session_id}).json()
            for name in ("sessions", "runs", "mount-grants", "artifacts")
        }
    folders = sorted(str(path.relative_to(base)) for path in base.rglob("*"))
    return {"folders": folders, **lists}


def _assert_code_point_refusal(reply: httpx.Response, route: str, body: bytes) -> str:
    assert reply.status_code == 422, (route, body[:90], reply.status_code, reply.text[:300])
    text = reply.text
    assert "invalid code point" in text or "not valid utf-8" in text.lower(), (route, text)
    return text


def test_every_job_route_answers_422_to_a_lone_surrogate_or_bad_bytes(world: World) -> None:
    before = _snapshot(world)
    with world.client() as client:
        names = [item["name"] for item in client.get("/jobs").json()["answer"]["items"]]
        assert {"submit", "status", "delete_tasks", "cancel"} <= set(names)
        answers = [
            (route, body, _post(client, route, body))
            for name in names
            for route in (f"/jobs/{name}", f"/jobs/{name}/events")
            for body in _job_bodies()
        ]
        assert len(answers) >= len(names) * 2 * 30
        # all that are not a 422, at once: a regression shows every route it reaches
        wrong = [
            (route, body[:60], getattr(reply, "status_code", reply))
            for route, body, reply in answers
            if isinstance(reply, str) or reply.status_code != 422
        ]
        assert wrong == []
        for route, body, reply in answers:
            assert isinstance(reply, httpx.Response)
            _assert_code_point_refusal(reply, route, body)
            assert set(reply.json()) == {"detail"}
        assert world.srv.call("status", task_id=world.task_id)["success"] is True
    assert _snapshot(world) == before
    assert "Traceback" not in "".join(world.srv.output)


AGENT_ROUTES = ("/sessions", "/runs", "/mount-grants", "/fork", "/restore")


def _api_bodies(world: World) -> dict[str, list[str]]:
    """Bodies for the ``/api/v1`` routes that read JSON, ``BAD`` where the bad text goes."""
    sid = world.session_id
    mount = str(world.allowed / "data")
    bodies = {
        "/api/v1/sessions": ['{"title": "BAD"}', '{"BAD": "t"}'],
        "/api/v1/runs": [
            '{"sessionId": "SID", "userPrompt": "BAD"}',
            '{"sessionId": "SID", "userPrompt": "p", "systemPrompt": "BAD"}',
            '{"sessionId": "SID", "userPrompt": "p", "artifactIds": ["BAD"]}',
            '{"sessionId": "SID", "userPrompt": "p", "BAD": true}',
        ],
        "/api/v1/mount-grants": [
            '{"sessionId": "SID", "name": "BAD", "hostPath": "MOUNT"}',
            '{"sessionId": "SID", "name": "n", "hostPath": "MOUNT/BAD"}',
        ],
        f"/api/v1/sessions/{sid}/fork": ['{"runId": "BAD"}'],
        f"/api/v1/sessions/{sid}/restore": ['{"runId": "BAD"}'],
        "/api/v1/gc": ['{"dryRun": true, "BAD": 1}'],
        "/api/v1/sync/diff": ['{"candidates": [{"taskId": "BAD"}]}'],
        "/api/v1/sync/held": ['{"source": "BAD"}'],
        "/api/v1/sync/delete": ['{"taskIds": ["BAD"]}'],
        "/api/v1/login": ['{"code": "BAD"}'],
    }
    return {
        route: [text.replace("SID", sid).replace("MOUNT", mount) for text in texts]
        for route, texts in bodies.items()
    }


@pytest.mark.parametrize("bad", [b"\\ud800", b"\\udfff", b"\xed\xa0\x80"], ids=repr)
def test_api_v1_bodies_answer_422_and_write_nothing(world: World, bad: bytes) -> None:
    before = _snapshot(world)
    with world.client() as client:
        for route, texts in _api_bodies(world).items():
            for text in texts:
                body = text.encode().replace(b"BAD", bad)
                reply = _post(client, route, body)
                assert isinstance(reply, httpx.Response), (route, body, reply)
                _assert_code_point_refusal(reply, route, body)
                answer = reply.json()
                if route.endswith(AGENT_ROUTES):  # the agent routes' error object
                    assert answer["error"]["code"] == "invalid", (route, answer)
                else:  # gc, sync and login answer as FastAPI does
                    assert set(answer) == {"detail"}, (route, answer)
    assert _snapshot(world) == before
    assert "Traceback" not in "".join(world.srv.output)


def _form(fields: list[tuple[bytes, bytes, bytes | None]]) -> bytes:
    """A multipart body; each part is (name, value, file name or None)."""
    out = b""
    for name, value, file_name in fields:
        disposition = b'form-data; name="' + name + b'"'
        if file_name is not None:
            disposition += b'; filename="' + file_name + b'"'
        out += b"--XyZ\r\nContent-Disposition: " + disposition + b"\r\n\r\n" + value + b"\r\n"
    return out + b"--XyZ--\r\n"


@pytest.mark.parametrize("raw", RAW, ids=repr)
def test_upload_form_fields_that_are_not_utf8_answer_422(world: World, raw: bytes) -> None:
    sid = world.session_id.encode()
    forms = [
        [(b"sessionId", sid + raw, None), (b"file", b"hello", b"a.txt")],
        [(b"sessionId", sid, None), (b"relativePath", b"d/" + raw, None), (b"file", b"x", b"a")],
        [(b"sessionId", sid, None), (b"file", b"hello", b"a" + raw + b".txt")],
        [(b"sessionId", sid, None), (b"n" + raw, b"v", None), (b"file", b"x", b"a")],
    ]
    uploads = world.srv.workspace / "agent" / "uploads"
    stored = sorted(path.name for path in uploads.rglob("*")) if uploads.exists() else []
    before = _snapshot(world)
    with world.client() as client:
        for fields in forms:
            reply = client.post(
                "/api/v1/artifacts/upload",
                content=_form(fields),
                headers={"content-type": "multipart/form-data; boundary=XyZ"},
            )
            assert reply.status_code == 422, (fields, reply.text[:300])
            error = reply.json()["error"]
            assert error["code"] == "invalid" and "not valid UTF-8" in error["message"]
    assert _snapshot(world) == before
    after = sorted(path.name for path in uploads.rglob("*")) if uploads.exists() else []
    assert after == stored


def test_mcp_answers_a_lone_surrogate_with_a_json_rpc_parse_error(world: World) -> None:
    # MCP's SDK parses its own bodies (pydantic's strict JSON reader): JSON-RPC's parse
    # error (-32700) on a 400 is that protocol's answer; what matters is no 500, nothing run
    before = _snapshot(world)
    headers = {**JSON, "accept": "application/json, text/event-stream"}
    call = '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": %s}'
    params = [
        '{"name": "submit", "arguments": {"task": "demo", "x": 1, "y": 2, "n": "\\ud800"}}',
        '{"name": "submit", "arguments": {"task": "demo", "x": 1, "y": 2, "\\udc00": 1}}',
    ]
    with world.client() as client:
        for param in params:
            reply = client.post("/mcp", content=call % param, headers=headers)
            assert reply.status_code == 400, reply.text[:300]
            assert reply.json()["error"]["code"] == -32700
    assert _snapshot(world) == before


def test_a_surrogate_pair_is_text_and_is_accepted(world: World) -> None:
    # the check refuses lone halves only: an escaped pair is one character
    with world.client() as client:
        reply = client.post("/api/v1/sessions", content='{"title": "\\ud83d\\ude00"}', headers=JSON)
        assert reply.status_code == 201, reply.text
        assert reply.json()["title"] == "\U0001f600"
