"""Job routes are found by their exact path, and answer as they did through the usual matching."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Match, Route
from starlette.testclient import TestClient

from runyard.api.app import create_app
from runyard.api.compat_jobs import COMPAT_JOBS, all_jobs
from runyard.api.exactroutes import ExactRoutes
from runyard.api.services import Services
from runyard.config import Settings
from serverproc import ServerProcess


def _scope(method: str, path: str, **extra: object) -> dict:
    return {"type": "http", "method": method, "path": path, "root_path": "", **extra}


def _answer(text: str):  # noqa: ANN202
    async def endpoint(request: object) -> PlainTextResponse:
        return PlainTextResponse(text)

    return endpoint


def test_the_first_route_of_the_path_that_takes_the_method_answers() -> None:
    get_a = Route("/a", _answer("get a"), methods=["GET"])
    post_a = Route("/a", _answer("post a"), methods=["POST"])
    again = Route("/a", _answer("later a"), methods=["POST"])
    with_param = Route("/a/{x}", _answer("param"), methods=["POST"])
    exact = ExactRoutes([get_a, post_a, again, with_param])
    assert set(exact.by_path) == {"/a"}  # a path with parameters is left to the usual matching

    match, child = exact.matches(_scope("POST", "/a"))
    assert (match, child["route"]) == (Match.FULL, post_a)
    match, child = exact.matches(_scope("HEAD", "/a"))  # Starlette's GET routes take HEAD
    assert (match, child["route"]) == (Match.FULL, get_a)
    match, child = exact.matches(_scope("DELETE", "/a"))
    assert (match, child["route"]) == (Match.PARTIAL, get_a)
    for scope in (
        _scope("POST", "/a/1"),
        _scope("POST", "/b"),
        _scope("POST", "/a", root_path="/behind/a/proxy"),
        {"type": "websocket", "path": "/a", "root_path": ""},
    ):
        assert exact.matches(scope) == (Match.NONE, {}), scope


def test_an_app_answers_through_them_as_through_its_routes() -> None:
    routes = [
        Route("/a", _answer("get a"), methods=["GET"], name="get_a"),
        Route("/a", _answer("post a"), methods=["POST"]),
        Route("/{name}", _answer("any"), methods=["POST"], name="any"),
    ]
    app = Starlette(routes=[ExactRoutes(routes), *routes])
    with TestClient(app) as client:
        assert client.post("/a").text == "post a"
        assert client.get("/a").text == "get a"
        assert client.post("/zzz").text == "any"
        refused = client.put("/a")
        assert refused.status_code == 405
        assert set(refused.headers["allow"].split(", ")) == {"GET", "HEAD"}
    # names still lead to the routes themselves
    assert app.url_path_for("get_a") == "/a"
    assert app.url_path_for("any", name="b") == "/b"


@pytest.fixture()
def services(tmp_path: Path) -> Iterator[Services]:
    built = Services.build(Settings(workspace_dir=tmp_path / "ws", log_dir=tmp_path / "logs"))
    try:
        yield built
    finally:
        built.stop()


def test_the_server_finds_every_job_route_by_its_path(services: Services) -> None:
    app = create_app(services.settings, services)
    exact = [route for route in app.router.routes if isinstance(route, ExactRoutes)]
    assert len(exact) == 1
    paths = [f"/jobs/{name}{events}" for name in all_jobs() for events in ("", "/events")]
    assert len(paths) > 26  # the seed's 13 jobs and runyard's own, each with its stream
    for path in paths:
        match, child = exact[0].matches(_scope("POST", path))
        assert match is Match.FULL, path
        assert child["route"].path == path
    match, child = exact[0].matches(_scope("GET", "/jobs"))
    assert (match, child["route"].path) == (Match.FULL, "/jobs")
    assert exact[0].matches(_scope("POST", "/jobs/no_such_job")) == (Match.NONE, {})
    # standing before the jobs router, not before the ones the app had already
    before = app.router.routes[: app.router.routes.index(exact[0])]
    assert [getattr(route, "path", None) for route in before] == [
        "/metrics", "/openapi.json", "/health",
    ]  # fmt: skip


def test_job_calls_answer_as_before(server: ServerProcess) -> None:
    # found in one lookup, still behind every middleware: no token, no answer
    body = {"arguments": {"task_id": "base#x#y"}}
    for headers in ({}, {"authorization": "Bearer not-the-token"}):
        refused = httpx.post(f"{server.url}/jobs/status", json=body, headers=headers)
        assert refused.status_code == 401, headers
    with server.client() as client:
        invalid = client.post("/jobs/status", json={"arguments": {"task_id": "demo#x#y"}})
        assert invalid.status_code == 200
        assert invalid.json()["success"] is False
        assert "Invalid task id 'demo#x#y'" in invalid.json()["answer"]
        missing = client.post("/jobs/status", json={"arguments": {}})
        assert missing.status_code == 422
        assert missing.json()["detail"][0]["loc"] == ["arguments", "task_id"]
        unknown = client.post("/jobs/no_such_job", json={"arguments": {}})
        assert unknown.status_code == 404
        assert "Unknown job 'no_such_job'" in unknown.text
        # a GET matches the POST route only in part: a later route answers, as before
        assert client.get("/jobs/status").status_code == 404
        assert client.get("/jobs").json()["answer"]["total"] == 13 + len(COMPAT_JOBS)
        events = client.post("/jobs/list_task_ids/events", json={"arguments": {}})
        assert events.status_code == 200
        assert events.headers["content-type"].startswith("text/event-stream")
        metrics = client.get("/metrics").text
    # the latency histogram names the route's template, as the usual matching does
    for route, status in (("/jobs/status", 200), ("/jobs/status", 422), ("/jobs/{name}", 404)):
        assert f'method="POST",route="{route}",status="{status}"' in metrics
