"""Bad input answers a 4xx in each API's own shape, never a 500, and leaves nothing behind.

One real server for the module, with a finished demo task, a session, an uploaded
artifact and a finished agent run (reference package), so every route that takes an id
is tried against ids that exist as well as ids that cannot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import httpx
import pytest

from serverproc import ServerProcess, start_server

JSON = {"content-type": "application/json"}
NON_FINITE = ("NaN", "Infinity", "-Infinity", "1e400", "-1e999")


@dataclass
class World:
    srv: ServerProcess
    task_id: str
    session_id: str
    artifact_id: str
    run_id: str

    def client(self, timeout: float = 60.0) -> httpx.Client:
        return self.srv.client(timeout)

    @property
    def task_in_url(self) -> str:
        return self.task_id.replace("#", "%23")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    srv = start_server(tmp_path_factory.mktemp("bad-input") / "srv", token="bad-input-token")
    try:
        yield _populate(srv)
    finally:
        srv.stop()


def _populate(srv: ServerProcess) -> World:
    submitted = srv.call("submit", task="demo", x=1, y=2, task_name="known")["answer"]
    srv.call("wait_task", task_id=submitted["task_id"], run_id=submitted["run_id"])
    with srv.client() as client:
        session_id = client.post("/api/v1/sessions", json={"title": "t"}).json()["id"]
        artifact = client.post(
            "/api/v1/artifacts/upload",
            data={"sessionId": session_id},
            files={"file": ("a.txt", b"hello", "text/plain")},
        ).json()
        run = client.post("/api/v1/runs", json={"sessionId": session_id, "userPrompt": "hi"})
        assert run.status_code == 201, run.text
        run_id = run.json()["id"]
        _wait_run(client, run_id)
    return World(srv, submitted["task_id"], session_id, artifact["id"], run_id)


def _wait_run(client: httpx.Client, run_id: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.get(f"/api/v1/runs/{run_id}").json()["state"] in ("succeeded", "failed"):
            return
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} did not finish")


def job_error(reply: httpx.Response, status: int) -> Any:
    assert reply.status_code == status, (reply.status_code, reply.text[:300])
    body = reply.json()
    assert set(body) == {"detail"}, body
    return body["detail"]


def agent_error(reply: httpx.Response, status: int) -> dict[str, str]:
    assert reply.status_code == status, (reply.status_code, reply.text[:300])
    body = reply.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return body["error"]  # type: ignore[no-any-return]


@pytest.fixture
def log_start(world: World) -> int:
    """Where the server's output stood when the test began."""
    return len(world.srv.output)


def tracebacks(srv: ServerProcess, since: int) -> list[str]:
    text = "".join(srv.output[since:])
    return [part[:2000] for part in text.split("Traceback (most recent call last)")[1:]]


def nested(depth: int, leaf: str = "1") -> str:
    """``depth`` levels: arrays and objects alternating, innermost ``leaf``."""
    opening = "".join("[" if level % 2 else '{"k":' for level in range(depth))
    closing = "".join("]" if level % 2 else "}" for level in reversed(range(depth)))
    return opening + leaf + closing


# --- JSON bodies ---------------------------------------------------------------------


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deep_nesting_is_a_400_and_the_server_keeps_serving(
    world: World, log_start: int, depth: int
) -> None:
    with world.client() as client:
        for body in (
            '{"arguments": {"task": "demo", "x": ' + nested(depth) + ', "y": 1}}',
            '{"arguments": ' + "[" * depth + "]" * depth + "}",
        ):
            reply = client.post("/jobs/submit", content=body, headers=JSON)
            assert "nested too deeply" in job_error(reply, 400)
        for body in ('{"title": ' + nested(depth) + "}", "[" * depth + "]" * depth):
            reply = client.post("/api/v1/sessions", content=body, headers=JSON)
            error = agent_error(reply, 400)
            assert error["code"] == "bad_request" and "nested too deeply" in error["message"]
        reply = client.post("/jobs/submit", content="[" * depth, headers=JSON)  # never closed
        job_error(reply, 400)
        assert client.get("/health").status_code == 200
        assert world.srv.call("status", task_id=world.task_id)["success"] is True
    assert tracebacks(world.srv, log_start) == []


def test_sixty_four_levels_pass_the_depth_check_and_sixty_five_do_not(world: World) -> None:
    # the envelope and "arguments" are two levels; "x" holds the rest
    inner_64, inner_65 = nested(62), nested(63)
    with world.client() as client:
        body = '{"arguments": {"task": "demo", "x": ' + inner_64 + ', "y": 1}}'
        reply = client.post("/jobs/submit", content=body, headers=JSON)
        assert reply.status_code == 200 and "nested too deeply" not in reply.text, reply.text
        assert reply.json()["success"] is False  # x must be an integer: a task-level refusal
        body = '{"arguments": {"task": "demo", "x": ' + inner_65 + ', "y": 1}}'
        job_error(client.post("/jobs/submit", content=body, headers=JSON), 400)

        body = '{"title": ' + nested(63) + "}"
        reply = client.post("/api/v1/sessions", content=body, headers=JSON)
        assert agent_error(reply, 422)["code"] == "invalid"  # a string was expected
        body = '{"title": ' + nested(64) + "}"
        reply = client.post("/api/v1/sessions", content=body, headers=JSON)
        assert agent_error(reply, 400)["code"] == "bad_request"


def _task_folders(world: World) -> list[str]:
    base = world.srv.workspace / "base"
    return sorted(path.name for path in base.iterdir()) if base.is_dir() else []


@pytest.mark.parametrize("literal", NON_FINITE)
def test_non_finite_numbers_are_a_422_that_does_not_echo_them(world: World, literal: str) -> None:
    folders = _task_folders(world)
    bodies = [
        '{"arguments": {"task": "demo", "x": %s, "y": 1, "task_name": "nf"}}',
        '{"arguments": {"task": "demo", "x": 1, "y": 2, "task_name": "nf", "n": {"a": [%s]}}}',
        '{"arguments": {"task_id": %s}}',
        '{"arguments": %s}',
        '{"arguments": {}, "target": %s}',
    ]
    with world.client() as client:
        for template in bodies:
            reply = client.post("/jobs/submit", content=template % literal, headers=JSON)
            detail = job_error(reply, 422)
            assert "non-finite" in detail and literal not in reply.text
            assert "NaN" not in reply.text and "Infinity" not in reply.text
        body = '{"arguments": {"task_id": ' + literal + "}}"
        job_error(client.post("/jobs/status", content=body, headers=JSON), 422)
        sessions = client.get("/api/v1/sessions").json()["items"]
        for body in ('{"title": %s}', '{"sessionId": "s", "userPrompt": "p", "artifactIds": [%s]}'):
            path = "/api/v1/sessions" if "title" in body else "/api/v1/runs"
            reply = client.post(path, content=body % literal, headers=JSON)
            error = agent_error(reply, 422)
            assert "non-finite" in error["message"] and literal not in reply.text
            assert "NaN" not in reply.text and "Infinity" not in reply.text
        assert client.get("/api/v1/sessions").json()["items"] == sessions
    assert _task_folders(world) == folders


# --- paths ---------------------------------------------------------------------------


def _id_routes(world: World, segment: str) -> list[tuple[str, str]]:
    """Every route with a path parameter, with ``segment`` in each parameter in turn."""
    task, run = world.task_in_url, world.run_id
    return [
        ("GET", f"/api/v1/tasks/{segment}/files"),
        ("GET", f"/api/v1/tasks/{segment}/files/x.txt"),
        ("GET", f"/api/v1/tasks/{task}/files/{segment}"),
        ("GET", f"/api/v1/tasks/{task}/files/sub/{segment}"),
        ("GET", f"/api/v1/runs/{segment}"),
        ("GET", f"/api/v1/runs/{segment}/files"),
        ("GET", f"/api/v1/runs/{segment}/files/final-answer.md"),
        ("GET", f"/api/v1/runs/{run}/files/{segment}"),
        ("GET", f"/api/v1/runs/{run}/files/{segment}/x"),
        ("GET", f"/api/v1/runs/{segment}/events"),
        ("POST", f"/api/v1/runs/{segment}/cancel"),
        ("GET", f"/api/v1/sessions/{segment}"),
        ("GET", f"/api/v1/sessions/{segment}/state"),
        ("POST", f"/api/v1/sessions/{segment}/close"),
        ("POST", f"/api/v1/sessions/{segment}/reopen"),
        ("GET", f"/api/v1/artifacts/{segment}"),
        ("GET", f"/api/v1/artifacts/{segment}/content"),
        ("DELETE", f"/api/v1/mount-grants/{segment}"),
        ("POST", f"/jobs/{segment}"),
        ("POST", f"/jobs/{segment}/events"),
    ]


def _assert_refused(reply: httpx.Response, path: str) -> None:
    assert reply.status_code in (400, 404, 405, 422), (path[:120], reply.text[:200])
    body = reply.json()
    if body in ({"detail": "Not Found"}, {"detail": "Method Not Allowed"}):
        return  # no route matched (e.g. a "/" inside a one-segment id): the router's answer
    if path.startswith("/api/"):
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    else:
        assert set(body) == {"detail"}, body


@pytest.mark.parametrize("length", [256, 10_000])
def test_overlong_path_segments_are_not_found_on_every_route(
    world: World, log_start: int, length: int
) -> None:
    with world.client() as client:
        for method, path in _id_routes(world, "a" * length):
            reply = client.request(method, path, json={} if method != "GET" else None)
            _assert_refused(reply, path)
            assert "a" * 256 not in reply.text  # the answer does not repeat the segment
    assert tracebacks(world.srv, log_start) == []


def test_a_path_longer_than_path_max_in_total_is_not_found(world: World, log_start: int) -> None:
    # each segment is a legal name; together they pass PATH_MAX under the task folder
    deep = "/".join(["d" * 200] * 20)
    with world.client() as client:
        for method, path in _id_routes(world, deep):
            reply = client.request(method, path, json={} if method != "GET" else None)
            _assert_refused(reply, path)
        near = "/".join(["d" * 200] * 19)  # under 4096 in the URL, over it on disk
        for path in (
            f"/api/v1/tasks/{world.task_in_url}/files/{near}",
            f"/api/v1/runs/{world.run_id}/files/{near}",
        ):
            _assert_refused(client.get(path), path)
    assert tracebacks(world.srv, log_start) == []


@pytest.mark.parametrize("segment", ["%ff", "%c3%28", "%00", "a%00b", "%ed%a0%80", "%25", "~"])
def test_invalid_utf8_and_nul_in_paths_are_refused(
    world: World, log_start: int, segment: str
) -> None:
    with world.client() as client:
        for method, path in _id_routes(world, segment):
            reply = client.request(method, path, json={} if method != "GET" else None)
            assert reply.status_code < 500, (path, reply.text[:200])
            if reply.status_code != 200:
                _assert_refused(reply, path)
    assert tracebacks(world.srv, log_start) == []


# --- query strings, headers, multipart -------------------------------------------------


QUERY_VALUES = [
    "%ff%fe",
    "%00",
    "a" * 20_000,
    "99999999999999999999999999",
    "-1",
    "1e400",
    "NaN",
    "%5B%5D",
]


@pytest.mark.parametrize("value", QUERY_VALUES, ids=lambda v: v[:12])
def test_bad_query_values_are_refused(world: World, log_start: int, value: str) -> None:
    sid = world.session_id
    with world.client() as client:
        for path in (
            "/api/v1/sessions",
            "/api/v1/runs",
            "/api/v1/artifacts",
            "/api/v1/mount-grants",
        ):
            for query in (
                f"sessionId={value}",
                f"sessionId={sid}&limit={value}",
                f"sessionId={sid}&cursor={value}",
                f"sessionId={sid}&a[b][c][d][e]=1&a[b][c][d][e]={value}&limit=1&limit=2",
            ):
                reply = client.get(f"{path}?{query}")
                assert reply.status_code < 500, (path, query[:80], reply.text[:200])
                if reply.status_code >= 400:
                    _assert_refused(reply, path)
    assert tracebacks(world.srv, log_start) == []


BAD_EVENT_IDS: list[str | bytes] = [
    "abc",
    "-1",
    "1e5",
    b"\xb2",  # latin-1 superscript two: str.isdigit() says yes, int() says no
    "9" * 5_000,  # past int()'s digit limit
    str(2**200),  # a number, but no position any stream could be at
    str(2**112),
]


@pytest.mark.parametrize("event_id", BAD_EVENT_IDS, ids=lambda v: repr(v)[:14])
def test_bad_last_event_ids_are_refused(
    world: World, log_start: int, event_id: str | bytes
) -> None:
    headers = {"last-event-id": event_id}
    with world.client() as client:
        reply = client.get(f"/api/v1/runs/{world.run_id}/events", headers=headers)
        error = agent_error(reply, 400)
        assert error["code"] == "bad_request" and "Last-Event-ID" in error["message"]
        body = {"arguments": {"task_id": world.task_id}}
        reply = client.post("/jobs/stream_task/events", json=body, headers=headers)
        assert "Last-Event-ID" in job_error(reply, 422)
    assert tracebacks(world.srv, log_start) == []


def test_event_ids_are_refused_exactly_past_the_largest_a_stream_can_send(world: World) -> None:
    # a run stream: 63-bit journal position and 40-bit log offset
    run_events = f"/api/v1/runs/{world.run_id}/events"
    # a task stream: 32-bit run tag, 40-bit events offset and 40-bit log offset
    body = {"arguments": {"task_id": world.task_id}}
    with world.client() as client:
        reply = client.get(run_events, headers={"last-event-id": str(2**103 - 1)})
        assert reply.status_code == 200 and "event: end" in reply.text, reply.text[:300]
        agent_error(client.get(run_events, headers={"last-event-id": str(2**103)}), 400)
        largest = {"last-event-id": str(2**112 - 1)}
        reply = client.post("/jobs/stream_task/events", json=body, headers=largest)
        assert reply.status_code == 200 and "event: result" in reply.text, reply.text[:300]
        past = {"last-event-id": str(2**112)}
        job_error(client.post("/jobs/stream_task/events", json=body, headers=past), 422)


def _multipart(name: str | bytes, boundary: str = "XyZ", value: bytes = b"v") -> bytes:
    raw_name = name.encode() if isinstance(name, str) else name
    return (
        f'--{boundary}\r\nContent-Disposition: form-data; name="'.encode()
        + raw_name
        + b'"\r\n\r\n'
        + value
        + f"\r\n--{boundary}--\r\n".encode()
    )


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (_multipart("n" * 100_000), "multipart/form-data; boundary=XyZ"),
        (_multipart(b"\xff\xfe"), "multipart/form-data; boundary=XyZ"),
        (_multipart("file\x00"), "multipart/form-data; boundary=XyZ"),
        (_multipart(""), "multipart/form-data; boundary=XyZ"),
        (_multipart("sessionId", value=b"\xff" * 10), "multipart/form-data; boundary=XyZ"),
        (
            b'--XyZ\r\nContent-Disposition: form-data; name="file"\r\n\r\nab',
            "multipart/form-data; boundary=XyZ",
        ),
        (_multipart("file", "b" * 1_000), "multipart/form-data; boundary=" + "b" * 1_000),
        (_multipart("file", "b" * 300), "multipart/form-data; boundary=" + "b" * 300),
        (b"x", "multipart/form-data; boundary=" + "b" * 100_000),
        (b"x", 'multipart/form-data; boundary=""'),
    ],
    ids=lambda v: repr(v)[:20],
)
def test_absurd_multipart_uploads_are_refused(
    world: World, log_start: int, body: bytes, content_type: str
) -> None:
    uploads = world.srv.workspace / "agent" / "uploads"
    before = sorted(p.name for p in uploads.rglob("*"))
    with world.client() as client:
        reply = client.post(
            "/api/v1/artifacts/upload", content=body, headers={"content-type": content_type}
        )
        assert 400 <= reply.status_code < 500, (reply.status_code, reply.text[:200])
        if reply.headers.get("content-type", "").startswith("application/json"):
            agent_error(reply, reply.status_code)
    assert sorted(p.name for p in uploads.rglob("*")) == before
    assert tracebacks(world.srv, log_start) == []


# --- every route of the OpenAPI document ------------------------------------------------


BAD_SEGMENTS = ["a" * 256, "a" * 10_000, "%ff", "%00", "..", "%2e%2e%2f%2e%2e"]
BAD_BODIES = [
    b'{"arguments": ' + b"[" * 5_000 + b"]" * 5_000 + b"}",
    b'{"arguments": {"x": NaN}}',
    b'{"arguments": {"x": [1e400]}, "target": -Infinity}',
    b'{"title": Infinity, "sessionId": NaN}',
    b"[" * 1_000,
    b'{"arguments": {"task_id": "' + b"a" * 10_000 + b'"}}',
    b'{"arguments": {"task_id": "base#'
    + b"a" * 300
    + b'#x", "task_ids": ["t#'
    + b"b" * 300
    + b'"]}}',
    b"\xff\xfe{",
    b'{"title": "\xff"}',
]


def _fill(path: str, params: list[str], bad: str, known: dict[str, str]) -> list[str]:
    filled = []
    for target in params:
        url = path
        for name in params:
            url = url.replace("{" + name + "}", bad if name == target else known.get(name, "x"))
        filled.append(url)
    return filled


def _known_url(path: str, params: list[str], known: dict[str, str]) -> str:
    for name in params:
        path = path.replace("{" + name + "}", known.get(name, "x"))
    return path


def test_every_openapi_route_answers_bad_input_with_a_4xx(world: World, log_start: int) -> None:
    with world.client() as client:
        spec = client.get("/openapi.json").json()
        known = {
            "task_id": world.task_in_url, "run_id": world.run_id, "session_id": world.session_id,
            "artifact_id": world.artifact_id, "path": "final-answer.md", "grant_id": "g",
        }  # fmt: skip
        tried = 0
        for path, operations in spec["paths"].items():
            params = [p.strip("{}").split(":")[0] for p in path.split("/") if p.startswith("{")]
            path = path.replace(":path}", "}")
            for method in operations:
                for bad in BAD_SEGMENTS:
                    for url in _fill(path, params, bad, known):
                        tried += _try(client, method, url, None)
                if method == "post":
                    for body in BAD_BODIES:
                        tried += _try(client, method, _known_url(path, params, known), body)
        assert tried > 300
    assert tracebacks(world.srv, log_start) == []


def _try(client: httpx.Client, method: str, url: str, body: bytes | None) -> int:
    headers = JSON if method != "get" else None
    reply = client.request(method.upper(), url, content=body, headers=headers)
    assert reply.status_code < 500, (method, url[:120], (body or b"")[:60], reply.text[:200])
    return 1


# --- a configured remote that answers garbage --------------------------------------------


class _HostileRemote(BaseHTTPRequestHandler):
    answers: ClassVar[dict[str, bytes]] = {
        "/jobs/status": b'{"answer": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "/jobs/list_task_ids": b'{"answer": NaN, "success": true, "metadata": {}}',
        "/jobs/get_task_graph": b'{"answer": 1e999, "success": true, "metadata": {}}',
    }

    def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
        self.rfile.read(int(self.headers.get("content-length", "0")))
        body = self.answers.get(self.path, b"{}")
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_remote_target_answering_unusable_json_is_a_502(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    remote = ThreadingHTTPServer(("127.0.0.1", 0), _HostileRemote)
    threading.Thread(target=remote.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{remote.server_address[1]}"
    root = tmp_path_factory.mktemp("hostile-remote")
    srv = start_server(root, token="t", config={"targets": {"evil": {"url": url}}})
    try:
        with srv.client() as client:
            for job in ("status", "list_task_ids", "get_task_graph"):
                body = {"target": "evil", "arguments": {"task_id": "base#demo#x"}}
                if job == "list_task_ids":
                    body["arguments"] = {}
                detail = job_error(client.post(f"/jobs/{job}", json=body), 502)
                assert "no usable JSON" in detail and "NaN" not in detail
            assert client.get("/health").status_code == 200
    finally:
        srv.stop()
        remote.shutdown()
        remote.server_close()
    assert tracebacks(srv, 0) == []
