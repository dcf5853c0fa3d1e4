"""The one error table (runyard.api.errormap): every class of the RunyardError family reaches
a row, an unknown subclass answers as its base, only server faults answer 5xx, and each row
is the status and code its clients see; then both surfaces through a real server."""

from __future__ import annotations

import importlib
import json
import pkgutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import runyard
from runyard.agents.errors import (
    AgentConflict,
    AgentForbidden,
    AgentInvalid,
    AgentNotFound,
    BadRequest,
    PackageNotFound,
    RunActive,
    SessionClosed,
    UploadTooLarge,
)
from runyard.api import errormap, startup
from runyard.api.errormap import (
    API_TABLE,
    DETAIL,
    ENVELOPE,
    JOB_TABLE,
    OWN_CODE,
    ROUTE_TABLE,
    api_error_response,
    api_rule,
    job_rule,
)
from runyard.api.idempotency import MAX_KEY_LENGTH
from runyard.api.jsonbody import BadJsonBody, JsonTooDeep
from runyard.backup.errors import BackupError
from runyard.errors import (
    AgentError,
    AmbiguousTaskId,
    BadEventId,
    BadIdempotencyKey,
    BadStreamQuery,
    BodyTooLarge,
    ClientError,
    ConfigError,
    ExecutorError,
    Forbidden,
    ForeignHost,
    ForeignOrigin,
    IdempotencyConflict,
    InsufficientStorage,
    InvalidInput,
    InvalidLimit,
    InvalidPipeline,
    InvalidSchedule,
    InvalidTaskId,
    MisplacedTarget,
    NoSuchFile,
    NotAuthenticated,
    NotParquet,
    PipelineRunNotFound,
    PreviewTooLarge,
    PreviewUnavailable,
    ResourcesRefused,
    RunMismatch,
    RunNotFound,
    RunyardError,
    ScheduleExists,
    ScheduleNotFound,
    ServerStopping,
    ServiceUnavailable,
    StagedFileRefused,
    TaskActive,
    TaskNameTaken,
    TaskNotFound,
    UnknownJob,
    UnknownTarget,
    UnknownUpstream,
    UnnameablePath,
    UnsafePath,
    UnsupportedMediaType,
    UpdateBusy,
    UpstreamError,
)
from runyard.runtime.liveness import RecordUnwritten
from runyard.sync.errors import SyncError, SyncRefused
from runyard.tasks.pipinstall import PipFailed
from serverproc import start_server

# What clients read today, row by row: (status, code). A row removed, or changed, is red.
API_CONTRACT: dict[type[BaseException], tuple[int, str]] = {
    RunyardError: (500, "internal"),
    ConfigError: (500, "config_error"),
    ExecutorError: (500, "executor_error"),
    RecordUnwritten: (507, "insufficient_storage"),
    BackupError: (500, "backup_failed"),
    UpstreamError: (502, "upstream_error"),
    SyncError: (502, "sync_failed"),
    ClientError: (502, "upstream_error"),
    InsufficientStorage: (507, "insufficient_storage"),
    PreviewUnavailable: (501, "preview_unavailable"),
    ServiceUnavailable: (503, "starting"),
    ServerStopping: (503, "stopping"),
    InvalidInput: (400, "bad_request"),
    InvalidTaskId: (400, "invalid_task_id"),
    UnknownUpstream: (422, "unknown_upstream"),
    InvalidPipeline: (422, "invalid_pipeline"),
    PipelineRunNotFound: (404, "not_found"),
    RunNotFound: (404, "run_not_found"),
    InvalidSchedule: (422, "invalid_schedule"),
    ScheduleNotFound: (404, "schedule_not_found"),
    ScheduleExists: (409, "conflict"),
    UpdateBusy: (409, "busy"),
    PipFailed: (422, "pip_failed"),
    UnsafePath: (400, "unsafe_path"),
    InvalidLimit: (422, "invalid_limit"),
    ResourcesRefused: (422, "invalid_resources"),
    NotParquet: (422, "not_parquet"),
    PreviewTooLarge: (413, "too_large"),
    NoSuchFile: (404, "file_not_found"),
    TaskNotFound: (404, "task_not_found"),
    AmbiguousTaskId: (409, "ambiguous_task_id"),
    TaskActive: (409, "conflict"),
    TaskNameTaken: (409, "conflict"),
    RunMismatch: (409, "conflict"),
    Forbidden: (403, "forbidden"),
    IdempotencyConflict: (409, "conflict"),
    NotAuthenticated: (401, DETAIL),
    ForeignHost: (403, "forbidden_host"),
    ForeignOrigin: (403, "forbidden_origin"),
    UnsupportedMediaType: (415, "unsupported_media_type"),
    BodyTooLarge: (413, "too_large"),
    UnnameablePath: (404, "not_found"),
    UnknownJob: (404, "not_found"),
    BadJsonBody: (422, "invalid"),
    JsonTooDeep: (400, "bad_request"),
    SyncRefused: (422, OWN_CODE),
    AgentError: (500, "internal"),
    AgentNotFound: (404, "not_found"),
    PackageNotFound: (404, "package_not_found"),
    AgentConflict: (409, "conflict"),
    SessionClosed: (409, "session_closed"),
    RunActive: (409, "run_active"),
    AgentForbidden: (403, "forbidden"),
    AgentInvalid: (422, "invalid"),
    BadRequest: (400, "bad_request"),
    UploadTooLarge: (413, "too_large"),
}
ROUTE_CONTRACT = {
    ("list_tasks", InvalidInput): (400, "invalid_query"),
    ("task_runs", InvalidInput): (400, "invalid_task_id"),
    ("task_metrics", InvalidInput): (400, "invalid_query"),
    ("compare_runs", InvalidInput): (400, "invalid_query"),
    ("sync_diff", InvalidInput): (422, "invalid_candidates"),
    ("sync_held", InvalidInput): (422, "invalid_source"),
    ("sync_delete", InvalidInput): (422, "invalid_delete"),
    ("gc", InvalidInput): (422, "invalid_request"),
}
JOB_CONTRACT: dict[type[BaseException], tuple[int, str]] = {
    BaseException: (200, ENVELOPE),
    InsufficientStorage: (507, ENVELOPE),
    IdempotencyConflict: (409, ENVELOPE),
    ServiceUnavailable: (503, ENVELOPE),
    Forbidden: (403, DETAIL),
    BadIdempotencyKey: (422, DETAIL),
    NotAuthenticated: (401, DETAIL),
    UnsupportedMediaType: (415, DETAIL),
    BodyTooLarge: (413, DETAIL),
    StagedFileRefused: (422, DETAIL),
    UnnameablePath: (404, DETAIL),
    BadJsonBody: (422, DETAIL),
    UnknownUpstream: (422, DETAIL),
    ResourcesRefused: (422, DETAIL),
    JsonTooDeep: (400, DETAIL),
    UnknownTarget: (422, DETAIL),
    UpstreamError: (502, DETAIL),
    BadEventId: (422, DETAIL),
    BadStreamQuery: (422, DETAIL),
    UnknownJob: (404, DETAIL),
    MisplacedTarget: (422, DETAIL),
    AmbiguousTaskId: (409, DETAIL),
}
# families whose errors are the server's to fix: the only ones that may answer 5xx
SERVER_FAULTS = (
    ConfigError, ExecutorError, RecordUnwritten, BackupError, SyncError, ClientError,
    InsufficientStorage, PreviewUnavailable, UpstreamError, ServiceUnavailable,
)  # fmt: skip


def _family() -> list[type[RunyardError]]:
    """Every RunyardError subclass runyard defines (all its modules imported first)."""
    for info in pkgutil.walk_packages(runyard.__path__, "runyard."):
        if not info.name.endswith("__main__"):  # runs the CLI
            importlib.import_module(info.name)

    def below(klass: type[RunyardError]) -> Iterator[type[RunyardError]]:
        for sub in klass.__subclasses__():
            yield sub
            yield from below(sub)

    found = {k for k in below(RunyardError) if k.__module__.startswith("runyard.")}
    return sorted(found, key=lambda k: f"{k.__module__}.{k.__qualname__}")


FAMILY = _family()


def _row_owner(klass: type[BaseException]) -> type[BaseException]:
    return next(ancestor for ancestor in klass.__mro__ if ancestor in API_TABLE)


def test_the_family_is_walked() -> None:
    names = {k.__qualname__ for k in FAMILY}
    assert {"SessionClosed", "SyncRefused", "BackupError", "KubeApiError", "NoTaskFolder"} <= names


@pytest.mark.parametrize("klass", FAMILY, ids=lambda k: k.__qualname__)
def test_every_family_class_reaches_a_row_and_only_faults_answer_5xx(
    klass: type[RunyardError],
) -> None:
    owner = _row_owner(klass)
    assert owner is not RunyardError, f"{klass.__qualname__} has no row of its own family"
    rule = api_rule(klass)
    assert rule == API_TABLE[owner]
    if rule.status >= 500:
        assert issubclass(klass, SERVER_FAULTS) or klass is AgentError, klass
    assert job_rule(klass).status in (200, 400, 401, 403, 404, 409, 413, 415, 422, 502, 503, 507)


@pytest.mark.parametrize("klass", list(API_CONTRACT), ids=lambda k: k.__qualname__)
def test_each_api_row_answers_what_its_clients_read(klass: type[BaseException]) -> None:
    rule = api_rule(klass)
    assert (rule.status, rule.code) == API_CONTRACT[klass]


def test_the_tables_hold_exactly_the_contracted_rows() -> None:
    assert set(API_TABLE) == set(API_CONTRACT)
    routes = {(route, k): (r.status, r.code) for route, rows in ROUTE_TABLE.items()
              for k, r in rows.items()}  # fmt: skip
    assert routes == ROUTE_CONTRACT
    assert {k: (r.status, r.code) for k, r in JOB_TABLE.items()} == JOB_CONTRACT


@pytest.mark.parametrize(
    ("base", "route"),
    [(SessionClosed, None), (InvalidInput, None), (TaskNotFound, None), (NoSuchFile, None),
     (AgentInvalid, None), (InvalidInput, "list_tasks"), (InvalidTaskId, "sync_diff")],
)  # fmt: skip
def test_an_unknown_subclass_answers_as_its_base(
    base: type[BaseException], route: str | None
) -> None:
    odd = type("Odd", (base,), {"__init__": Exception.__init__, "__str__": Exception.__str__})
    assert api_rule(odd, route) == api_rule(base, route)
    assert job_rule(odd) == job_rule(base)
    answer = api_error_response(odd("odd"), route)
    assert answer.status_code == api_rule(base, route).status < 500


def test_a_route_row_beats_a_shared_row_and_sync_refusals_keep_their_code() -> None:
    # a bad candidate id in a sync diff is a bad candidate list, as its clients read it
    assert api_rule(InvalidTaskId, "sync_diff").code == "invalid_candidates"
    assert api_rule(InvalidTaskId, "sync_task").code == "invalid_task_id"
    assert api_error_response(SyncRefused("t", "active", "busy")).status_code == 409
    refused = api_error_response(SyncRefused("t", "bad_member", "a link"))
    assert refused.status_code == 422 and b'"code":"bad_member"' in refused.body
    assert errormap.job_error_response(Forbidden("no")).body == b'{"detail":"no"}'


def _v1_error(reply: Any, status: int) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    error: dict[str, Any] = reply.json()["error"]
    return error


def test_both_surfaces_answer_through_the_table_on_a_real_server(tmp_path: Path) -> None:
    server = start_server(tmp_path / "srv")
    try:
        with server.client() as client:
            bad_id = client.get("/api/v1/tasks/not.an.id/runs")  # not-an-id: a name
            assert _v1_error(bad_id, 400)["code"] == "invalid_task_id"
            missing = client.get("/api/v1/tasks/base%23demo%23nope/runs")
            assert _v1_error(missing, 404)["code"] == "task_not_found"
            listed = client.get("/api/v1/tasks", params={"limit": "0"})
            assert _v1_error(listed, 400)["code"] == "invalid_query"
            gc = client.post("/api/v1/gc", json={"dryRun": "yes"})
            assert _v1_error(gc, 422)["code"] == "invalid_request"
            held = client.post("/api/v1/sync/held", json={"source": ""})
            assert _v1_error(held, 422)["code"] == "invalid_source"
            preview = client.get("/api/v1/tasks/base%23demo%23nope/preview/a.parquet?limit=0")
            assert _v1_error(preview, 422)["code"] == "invalid_limit"
            key = {"idempotency-key": "k" * (MAX_KEY_LENGTH + 1)}
            submit = client.post("/jobs/submit", json={"arguments": {"task": "demo"}},
                                 headers=key)  # fmt: skip
            assert submit.status_code == 422 and "Idempotency-Key" in submit.json()["detail"]
            status = client.post("/jobs/status", json={"arguments": {"task_id": "base#demo#x"}})
            assert status.status_code == 200
            assert status.json()["success"] is False
            assert status.json()["answer"].startswith("KeyError: ")
        _edge_refusals(server)
    finally:
        server.stop()


def test_render_picks_the_surface_by_path_and_carries_the_rows_headers() -> None:
    refusal = NotAuthenticated("Missing or invalid bearer token")
    for path in ("/api/v1/sessions", "/jobs/status", "/metrics"):
        answer = errormap.render(refusal, path)
        assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"
        assert answer.body == b'{"detail":"Missing or invalid bearer token"}'
    host = ForeignHost("Host 'evil' does not name this server")
    assert errormap.render(host, "/api/v1/tasks").body == (
        b'{"error":{"code":"forbidden_host","message":"Host \'evil\' does not name this server"}}'
    )
    assert errormap.render(host, "/jobs/submit").body == (
        b'{"detail":"Host \'evil\' does not name this server"}'
    )
    assert "www-authenticate" not in errormap.render(host, "/jobs/submit").headers
    deep = errormap.as_http_exception(JsonTooDeep(64))
    assert (deep.status_code, deep.detail) == (400, str(JsonTooDeep(64)))
    challenged = errormap.as_http_exception(refusal)
    assert challenged.headers == {"WWW-Authenticate": "Bearer"}


def _detail(reply: Any, status: int) -> Any:
    assert reply.status_code == status, reply.text
    detail = reply.json()["detail"]
    return detail


def _edge_refusals(server: Any) -> None:
    """The refusals of the middlewares and of body reading, both surfaces, as before."""
    with httpx.Client(base_url=server.url, timeout=30) as stranger:
        for reply in (stranger.get("/api/v1/tasks"), stranger.post("/jobs/status", json={})):
            assert _detail(reply, 401) == "Missing or invalid bearer token"
            assert reply.headers["www-authenticate"] == "Bearer"
    with server.client() as client:
        evil = {"host": "evil.example"}
        assert _v1_error(client.get("/api/v1/tasks", headers=evil), 403)["code"] == "forbidden_host"
        assert "evil.example" in _detail(client.post("/jobs/status", json={}, headers=evil), 403)
        page = {"origin": "http://evil.example"}
        refused = client.get("/api/v1/tasks", headers=page)
        assert _v1_error(refused, 403)["code"] == "forbidden_origin"
        plain = {"content-type": "text/plain"}
        gc = client.post("/api/v1/gc", content=b"{}", headers=plain)
        assert _v1_error(gc, 415)["code"] == "unsupported_media_type"
        assert "text/plain" in _detail(
            client.post("/jobs/status", content=b"{}", headers=plain), 415
        )
        assert _v1_error(client.get("/api/v1/tasks/" + "a" * 300), 404)["code"] == "not_found"
        assert "255" in _detail(client.get("/jobs/" + "a" * 300), 404)
        deep = b"[" * 100 + b"]" * 100
        json_type = {"content-type": "application/json"}
        sent = client.post("/jobs/status", content=deep, headers=json_type)
        assert "nested too deeply" in _detail(sent, 400)
        sent = client.post("/jobs/status", content=b"{", headers=json_type)
        assert "Malformed" in _detail(sent, 422)
        sent = client.post("/api/v1/gc", content=deep, headers=json_type)
        assert "nested too deeply" in _detail(sent, 400)
        stream = {"arguments": {"task_id": "base#demo#x"}}
        sent = client.post("/jobs/stream_task/events", json=stream, headers={"last-event-id": "x"})
        assert _detail(sent, 422).startswith("Last-Event-ID must be an event id of this stream")
        assert _detail(client.post("/jobs/nope", json={}), 404).startswith("Unknown job 'nope'")
        inside = {"arguments": {"task_id": "base#demo#x", "target": "elsewhere"}}
        assert "top level" in _detail(client.post("/jobs/status", json=inside), 422)
        loose = _detail(client.post("/jobs/status", json={"arguments": {}, "extra": 1}), 422)
        assert {"missing", "extra_forbidden"} == {error["type"] for error in loose}
        target = {"arguments": {"task_id": "base#demo#x"}, "target": "nowhere"}
        assert "Unknown target 'nowhere'" in _detail(client.post("/jobs/status", json=target), 422)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/jobs/list_task_ids", {"success": False}),
        ("/api/v1/tasks", {"error": {"code": "starting"}}),
        ("/mcp", {"error": {"code": "starting"}}),
    ],
)
def test_a_request_the_start_up_holds_back_too_long_answers_503_from_the_table(
    path: str, body: dict[str, Any]
) -> None:
    answer = startup.unavailable(path)
    assert answer.status_code == 503 and answer.headers["retry-after"] == "2"
    got = json.loads(bytes(answer.body))
    message = "The server is starting (building its task index); retry shortly"
    if "success" in body:
        assert got["success"] is False
        assert got["answer"] == f"ServiceUnavailable: {message}"
    else:
        assert got == {"error": {"code": "starting", "message": message}}
