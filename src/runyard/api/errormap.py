"""The one table from the error family to HTTP answers, for both API surfaces.

Domain code raises :class:`~runyard.errors.RunyardError` subclasses that say what went
wrong; only this module says how HTTP answers them. A class without a row of its own
answers as its nearest ancestor with one (the class's MRO is walked), so a new subclass
never turns into a 500 unless its family is a server fault.

``/api/v1`` answers ``{"error": {"code": ..., "message": str(exc)}}`` with the status of
:data:`API_TABLE`. ``/mlflow/`` (MLflow's tracking API) answers MLflow's
``{"error_code": ..., "message": ...}`` with the same statuses
(:mod:`runyard.api.mlflow.errors`). A few routes name their refusals of bad input after
the route (their clients see ``invalid_query``, ``invalid_candidates``...):
:data:`ROUTE_TABLE` holds those rows, keyed by the route's name, and is searched before
the shared rows.

The Job API keeps the seed's envelope: a job that fails answers HTTP 200 with
``{"answer": "ErrorType: message", "success": false, "metadata": {}}``. :data:`JOB_TABLE`
lists the refusals that change the status: with the envelope (:data:`ENVELOPE`, such as the
507 of a full disk) or, for a request refused before any job ran, FastAPI's own
``{"detail": message}`` (:data:`DETAIL`, such as the 403 of a run token).

The edge of a request answers here too: the pure-ASGI middlewares (a missing token, a
foreign Host or Origin, a non-JSON state change, a path no file can have) raise nothing but
build a family error and answer ``render(exc, path)(scope, receive, send)``; request-body
reading and forwarding raise family errors whose rows give their status. A row may carry
headers (the ``WWW-Authenticate`` of a 401) and, on ``/api/v1``, the :data:`DETAIL` shape
(a 401 answers ``{"detail"}`` on every surface).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException, Request
from starlette.responses import JSONResponse, Response

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
from runyard.api.envelope import error_answer, job_response
from runyard.api.jsonbody import BadJsonBody, JsonTooDeep
from runyard.api.mlflow.errors import mlflow_error
from runyard.api.scopes import request_scope, scrub
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
from runyard.workspace.filenames import printable

log = logging.getLogger("runyard.api")


@dataclass(frozen=True)
class Rule:
    """How one error class answers: the HTTP status, the code its clients read and the
    headers the answer carries (the challenge of a 401)."""

    status: int
    code: str
    headers: tuple[tuple[str, str], ...] = ()


OWN_CODE = ""  # the code is the error's own machine code (SyncRefused.code)
ENVELOPE = "envelope"  # Job API: the seed's envelope, success false
DETAIL = "detail"  # {"detail": message}, the request was refused before any job ran
API_PREFIX = "/api/"  # the paths that answer the /api/v1 error object
MLFLOW_PREFIX = "/mlflow/"  # MLflow's tracking API (api/mlflow): its error shape
# the answer to a request without a usable token, on every surface (RFC 6750)
CHALLENGE = (("WWW-Authenticate", "Bearer"),)
# when to ask again while the server starts (its index is being built)
RETRY_STARTING = (("Retry-After", "2"),)

API_TABLE: dict[type[BaseException], Rule] = {
    # server faults: the operator must act, the request was fine
    RunyardError: Rule(500, "internal"),
    ConfigError: Rule(500, "config_error"),
    ExecutorError: Rule(500, "executor_error"),
    RecordUnwritten: Rule(507, "insufficient_storage"),
    BackupError: Rule(500, "backup_failed"),
    UpstreamError: Rule(502, "upstream_error"),
    SyncError: Rule(502, "sync_failed"),
    ClientError: Rule(502, "upstream_error"),
    InsufficientStorage: Rule(507, "insufficient_storage"),
    PreviewUnavailable: Rule(501, "preview_unavailable"),
    ServiceUnavailable: Rule(503, "starting", RETRY_STARTING),
    ServerStopping: Rule(503, "stopping", RETRY_STARTING),
    # the caller's request
    InvalidInput: Rule(400, "bad_request"),
    InvalidTaskId: Rule(400, "invalid_task_id"),
    UnknownUpstream: Rule(422, "unknown_upstream"),
    InvalidPipeline: Rule(422, "invalid_pipeline"),  # refused whole, nothing made
    PipelineRunNotFound: Rule(404, "not_found"),
    InvalidSchedule: Rule(422, "invalid_schedule"),
    ScheduleNotFound: Rule(404, "schedule_not_found"),
    ScheduleExists: Rule(409, "conflict"),
    UnsafePath: Rule(400, "unsafe_path"),
    InvalidLimit: Rule(422, "invalid_limit"),
    ResourcesRefused: Rule(422, "invalid_resources"),
    NotParquet: Rule(422, "not_parquet"),
    PreviewTooLarge: Rule(413, "too_large"),
    NoSuchFile: Rule(404, "file_not_found"),
    TaskNotFound: Rule(404, "task_not_found"),
    RunNotFound: Rule(404, "run_not_found"),
    AmbiguousTaskId: Rule(409, "ambiguous_task_id"),
    TaskActive: Rule(409, "conflict"),
    TaskNameTaken: Rule(409, "conflict"),
    RunMismatch: Rule(409, "conflict"),
    Forbidden: Rule(403, "forbidden"),
    IdempotencyConflict: Rule(409, "conflict"),
    UpdateBusy: Rule(409, "busy"),  # an update or restart is under way: ask again after it
    PipFailed: Rule(422, "pip_failed"),  # the requirement or wheel did not install (its output)
    # the request's edge: the middlewares and body reading, before any route works
    NotAuthenticated: Rule(401, DETAIL, CHALLENGE),  # FastAPI's shape on every surface
    ForeignHost: Rule(403, "forbidden_host"),
    ForeignOrigin: Rule(403, "forbidden_origin"),
    UnsupportedMediaType: Rule(415, "unsupported_media_type"),
    BodyTooLarge: Rule(413, "too_large"),
    UnnameablePath: Rule(404, "not_found"),
    UnknownJob: Rule(404, "not_found"),
    BadJsonBody: Rule(422, "invalid"),
    JsonTooDeep: Rule(400, "bad_request"),
    SyncRefused: Rule(422, OWN_CODE),
    # the agent-run backend
    AgentError: Rule(500, "internal"),
    AgentNotFound: Rule(404, "not_found"),
    PackageNotFound: Rule(404, "package_not_found"),
    AgentConflict: Rule(409, "conflict"),
    SessionClosed: Rule(409, "session_closed"),
    RunActive: Rule(409, "run_active"),
    AgentForbidden: Rule(403, "forbidden"),
    AgentInvalid: Rule(422, "invalid"),
    BadRequest: Rule(400, "bad_request"),
    UploadTooLarge: Rule(413, "too_large"),
}

# the refusals a receiver answers 409 (the rules refuse it) or 413 (larger than
# sync.max_task_mb); the rest (members, hashes) 422
SYNC_STATUS = {"active": 409, "newer": 409, "too_large": 413}

ROUTE_TABLE: dict[str, dict[type[BaseException], Rule]] = {
    "list_tasks": {InvalidInput: Rule(400, "invalid_query")},
    "task_runs": {InvalidInput: Rule(400, "invalid_task_id")},
    "task_metrics": {InvalidInput: Rule(400, "invalid_query")},
    "compare_runs": {InvalidInput: Rule(400, "invalid_query")},
    "sync_diff": {InvalidInput: Rule(422, "invalid_candidates")},
    "sync_held": {InvalidInput: Rule(422, "invalid_source")},
    "sync_delete": {InvalidInput: Rule(422, "invalid_delete")},
    "gc": {InvalidInput: Rule(422, "invalid_request")},
}

JOB_TABLE: dict[type[BaseException], Rule] = {
    BaseException: Rule(200, ENVELOPE),  # the seed: a job that failed is a 200 answer
    InsufficientStorage: Rule(507, ENVELOPE),
    ServiceUnavailable: Rule(503, ENVELOPE, RETRY_STARTING),
    IdempotencyConflict: Rule(409, ENVELOPE),
    Forbidden: Rule(403, DETAIL),
    BadIdempotencyKey: Rule(422, DETAIL),
    NotAuthenticated: Rule(401, DETAIL, CHALLENGE),
    UnsupportedMediaType: Rule(415, DETAIL),
    BodyTooLarge: Rule(413, DETAIL),
    StagedFileRefused: Rule(422, DETAIL),  # POST/DELETE /files, as AxonX's HTTPException
    UnnameablePath: Rule(404, DETAIL),
    BadJsonBody: Rule(422, DETAIL),
    UnknownUpstream: Rule(422, DETAIL),  # a submit's depends_on: nothing was made
    ResourcesRefused: Rule(422, DETAIL),  # a submit's resources: nothing was made
    JsonTooDeep: Rule(400, DETAIL),
    UnknownTarget: Rule(422, DETAIL),
    UpstreamError: Rule(502, DETAIL),
    BadEventId: Rule(422, DETAIL),  # the Job events route; /api/v1 streams answer a 400
    BadStreamQuery: Rule(422, DETAIL),  # ?metrics= of the Job events route
    UnknownJob: Rule(404, DETAIL),
    MisplacedTarget: Rule(422, DETAIL),
    AmbiguousTaskId: Rule(409, DETAIL),  # a task name of several tasks: no job ran
}

# HTTPExceptions of shared helpers (body reading, the guard) as /api/v1 codes (agents' routes)
HTTP_CODES = {400: "bad_request", 404: "not_found", 409: "conflict", 413: "too_large"}
HTTP_DEFAULT_CODE = "invalid"
# FastAPI's RequestValidationError (a body or parameter a route's model refuses), /api/v1
VALIDATION = Rule(422, "invalid")
# a Job envelope its model refuses: FastAPI's own answer, pydantic's errors under "detail"
ENVELOPE_INVALID = Rule(422, DETAIL)


def _find(table: dict[type[BaseException], Rule], klass: type[BaseException]) -> Rule | None:
    for ancestor in klass.__mro__:
        rule = table.get(ancestor)
        if rule is not None:
            return rule
    return None


def api_rule(klass: type[BaseException], route: str | None = None) -> Rule:
    """The ``/api/v1`` status and code of ``klass`` raised in the route named ``route``."""
    specific = _find(ROUTE_TABLE.get(route or "", {}), klass)
    return specific or _find(API_TABLE, klass) or API_TABLE[RunyardError]


def job_rule(klass: type[BaseException]) -> Rule:
    """The Job API's status and answer form (:data:`ENVELOPE` or :data:`DETAIL`)."""
    return _find(JOB_TABLE, klass) or JOB_TABLE[BaseException]


def api_error(
    status: int, code: str, message: str, headers: tuple[tuple[str, str], ...] = ()
) -> JSONResponse:
    message = printable(message)  # a file name that is not UTF-8 has no JSON form as it is
    if code == DETAIL:
        return JSONResponse({"detail": message}, status_code=status, headers=dict(headers))
    payload = {"error": {"code": code, "message": message}}
    return JSONResponse(payload, status_code=status, headers=dict(headers))


def api_error_response(exc: BaseException, route: str | None = None) -> JSONResponse:
    """The ``/api/v1`` answer to ``exc``."""
    rule = api_rule(type(exc), route)
    code = rule.code
    status = rule.status
    if isinstance(exc, SyncRefused):
        code = exc.code
        status = SYNC_STATUS.get(exc.code, rule.status)
    if status >= 500 and status != 507:
        log.error("%s answered %d: %s", type(exc).__name__, status, exc)
    return api_error(status, code, str(exc), rule.headers)


def http_exception_response(exc: HTTPException, message: str) -> JSONResponse:
    """An HTTPException of a shared helper in the ``/api/v1`` error shape."""
    code = HTTP_CODES.get(exc.status_code, HTTP_DEFAULT_CODE)
    return api_error(exc.status_code, code, message)


def validation_error_response(message: str) -> JSONResponse:
    """A request a route's model refused (FastAPI's RequestValidationError), ``/api/v1``."""
    return api_error(VALIDATION.status, VALIDATION.code, message)


def job_error_response(exc: BaseException, scrub: Callable[[str], str] = str) -> JSONResponse:
    """The Job API's answer to ``exc`` with the status of its row (the envelope or detail)."""
    rule = job_rule(type(exc))
    headers = dict(rule.headers)
    if rule.code == DETAIL:
        detail = printable(scrub(str(exc)))
        return JSONResponse({"detail": detail}, status_code=rule.status, headers=headers)
    answer = job_response(printable(scrub(error_answer(exc))), False)
    return JSONResponse(answer, status_code=rule.status, headers=headers)


def render(
    exc: BaseException,
    path: str,
    route: str | None = None,
    scrub: Callable[[str], str] = str,
) -> Response:
    """The one answer to ``exc`` for a request to ``path``: the ``/api/v1`` error object
    under :data:`API_PREFIX`, the Job API's answer elsewhere. The app's handler and the
    pure-ASGI middlewares (auth, the guard, path limits) all answer through it."""
    if path.startswith(API_PREFIX):
        return api_error_response(exc, route)
    if path.startswith(MLFLOW_PREFIX):  # MLflow's client reads its own error shape
        rule = api_rule(type(exc), route)
        return mlflow_error(exc, rule.status, rule.headers)
    return job_error_response(exc, scrub)


def as_http_exception(exc: BaseException) -> HTTPException:
    """``exc`` as the HTTPException of its Job row, for helpers shared by routes that shape
    HTTPExceptions their own way (request-body reading: the agent routes' error object,
    FastAPI's ``{"detail"}`` elsewhere)."""
    rule = job_rule(type(exc))
    return HTTPException(rule.status, str(exc), headers=dict(rule.headers) or None)


def job_failure(exc: Exception, scrub: Callable[[str], str]) -> dict[str, Any] | Response:
    """What a Job route answers for a job that raised ``exc``: the seed's 200 envelope with
    ``success: false`` as a plain dict, or the full response when the row changes the status.
    HTTPExceptions (already an answer) are raised again."""
    if isinstance(exc, HTTPException):
        raise exc
    if job_rule(type(exc)).status == 200:
        return job_response(printable(scrub(error_answer(exc))), False)
    return job_error_response(exc, scrub)


def envelope_refusal(errors: list[dict[str, Any]]) -> HTTPException:
    """The refusal of a Job envelope its model does not validate (``errors``: pydantic's)."""
    return HTTPException(ENVELOPE_INVALID.status, errors)


async def family_handler(request: Request, exc: Exception) -> Response:
    """The app's handler for a family error a route did not answer itself: ``/api/v1``
    routes answer the error object (the route's own rows first), the rest the Job API's."""
    route = getattr(request.scope.get("route"), "name", None)
    services = request.app.state.services
    scope = request_scope(request)
    return render(exc, request.url.path, route, lambda text: scrub(services, text, scope))
