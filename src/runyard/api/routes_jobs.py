"""HTTP routes of the Task Job API: ``GET /jobs``, ``POST /jobs/{name}`` and its ``/events``."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel
from starlette.responses import Response, StreamingResponse

from runyard.agents.models import RunScope
from runyard.api.agent_chat import agent_chat_events
from runyard.api.catalogue import callable_jobs, catalogue_item, refuse_admin_only
from runyard.api.compat_jobs import all_jobs
from runyard.api.envelope import (
    JobResponse,
    envelope_model,
    error_answer,
    job_response,
)
from runyard.api.errormap import api_rule, job_error_response, job_failure
from runyard.api.forward import forward_call, forward_stream, resolve_target
from runyard.api.fulllists import full_list_response, is_full_list
from runyard.api.idempotent import caller_route, find_keyed_task, run_once_in_thread
from runyard.api.jobs import Job, JobResult, submit_now
from runyard.api.metric_events import wants_metrics
from runyard.api.requestbody import read_json_body, validate_envelope
from runyard.api.scopes import request_scope, scrub
from runyard.api.services import Services
from runyard.api.sse import SSE_HEADERS
from runyard.api.streaming import (
    parse_last_event_id,
    single_result,
    stream_task_events,
)
from runyard.api.taskrefs import resolved_args
from runyard.changes import ChangeHub
from runyard.errors import Forbidden, MisplacedTarget, RunyardError, TaskNotFound, UnknownJob

log = logging.getLogger("runyard.api")
# failures a caller causes: answered, not logged as a server fault
EXPECTED_FAILURES = (HTTPException, ValueError, KeyError, LookupError, OSError)


def build_jobs_router(services: Services, hub: ChangeHub) -> tuple[APIRouter, dict[str, Any]]:
    """The router and the JSON Schemas its request bodies reference (for OpenAPI)."""
    router = APIRouter()
    schemas: dict[str, Any] = {"JobResponse": JobResponse.model_json_schema()}

    @router.get("/jobs", response_model=JobResponse, tags=["jobs"])
    async def catalogue(request: Request) -> dict[str, Any]:
        jobs = callable_jobs(request_scope(request))  # a run token's: what it may call
        items = [catalogue_item(job) for job in jobs.values()]
        return job_response({"items": items, "total": len(items)}, True)

    for job in all_jobs().values():
        model = envelope_model(job.name, job.args)
        schemas.update(_component_schemas(model))
        _add_job_routes(router, services, hub, job, model)

    @router.post("/jobs/{name}", include_in_schema=False)
    @router.post("/jobs/{name}/events", include_in_schema=False)
    async def unknown_job(name: str) -> None:
        raise UnknownJob(f"Unknown job {name!r}. Jobs: {', '.join(all_jobs())}")

    return router, schemas


def _add_job_routes(
    router: APIRouter, services: Services, hub: ChangeHub, job: Job, model: type[BaseModel]
) -> None:
    body = {"requestBody": _request_body(model)}

    async def call(request: Request) -> Any:
        envelope, raw = await _parse(request, services, model)
        scope = request_scope(request)
        if envelope.target:
            target = resolve_target(services.settings, _allowed_target(envelope.target, scope))
            return await forward_call(target, job.name, raw)
        if is_full_list(job.name, envelope.arguments, scope):
            return await full_list_response(services, job.name, envelope.arguments)

        if job.name != "submit":
            return await _run(job, services, envelope.arguments, hub, scope)
        return await run_once_in_thread(
            request, services, caller_route("jobs/submit", scope), raw,
            lambda: _submitted(services, envelope.arguments, scope),
            conflict=job_error_response,
            recover=lambda mark: _recovered(services, mark),
        )  # fmt: skip

    async def events(request: Request) -> Response:
        envelope, raw = await _parse(request, services, model)
        scope = request_scope(request)
        last_event_id = request.headers.get("last-event-id")
        metrics = job.name == "stream_task" and wants_metrics(request.query_params)
        # BadEventId: a 422 (api/errormap.py)
        cursor = parse_last_event_id(last_event_id, metrics)
        if envelope.target:
            target = resolve_target(services.settings, _allowed_target(envelope.target, scope))
            return await forward_stream(target, job.name, raw, last_event_id)
        if job.name == "stream_task":
            try:
                args = await resolved_args(services, envelope.arguments, scope)
                stream = stream_task_events(
                    services, hub, args.task_id, args.poll_interval, cursor, scope
                )
            except TaskNotFound as exc:  # answered in the stream, as for a full id of no task
                stream = single_result(scrub(services, error_answer(exc), scope), False)
        elif job.name == "agent_chat":  # the turn as it goes (api/agent_chat.py)
            stream = agent_chat_events(services, envelope.arguments, scope)
        else:
            answer = await _run(job, services, envelope.arguments, hub, scope)
            if isinstance(answer, Response):
                return answer
            stream = single_result(**answer)
        return StreamingResponse(stream, media_type="text/event-stream", headers=SSE_HEADERS)

    router.add_api_route(
        f"/jobs/{job.name}",
        call,
        methods=["POST"],
        response_model=JobResponse,
        summary=job.description,
        openapi_extra=body,
        tags=["jobs"],
        name=job.name,
    )
    router.add_api_route(
        f"/jobs/{job.name}/events",
        events,
        methods=["POST"],
        openapi_extra=body,
        summary=f"{job.name} as Server-Sent Events",
        tags=["jobs"],
        name=f"{job.name}_events",
        response_class=StreamingResponse,
        responses={200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}}},
    )


async def _parse(
    request: Request, services: Services, model: type[BaseModel]
) -> tuple[Any, dict[str, Any]]:
    data = await read_json_body(request, services.settings.max_body_bytes)
    envelope: Any = validate_envelope(model, data)
    raw = data.get("arguments", {}) if isinstance(data, dict) else {}
    if isinstance(raw, dict) and "target" in raw:
        raise MisplacedTarget(
            "'target' belongs at the top level of the request, not inside 'arguments'"
        )
    return envelope, raw


def _allowed_target(name: str, scope: RunScope | None) -> str:
    """Forwarding sends the target's own token: never on behalf of a run token."""
    if scope is not None:
        raise Forbidden("A run token may not forward calls to a target")
    return name


async def _run(
    job: Job, services: Services, arguments: Any, hub: ChangeHub, scope: RunScope | None
) -> dict[str, Any] | Response:
    """The job's Job envelope; a failure as the error table says (api/errormap.py): mostly
    HTTP 200 with ``success: false``, a 507 envelope for a full disk, a 403 for a run token."""
    try:
        refuse_admin_only(job.name, scope)
        arguments = await resolved_args(services, arguments, scope)  # names to full ids
        result = await job.run(services, arguments, hub, scope)
    except Exception as exc:
        return _failed(job.name, services, scope, exc)
    return _enveloped(services, scope, result)


def _submitted(services: Services, arguments: Any, scope: RunScope | None) -> Any:
    """:func:`_run` of the submit job, in the calling thread (the thread pool's): a keyed
    submit reserves its key, submits and keeps its answer in one hop there."""
    try:
        result = submit_now(services, arguments, scope)
    except Exception as exc:
        return _failed("submit", services, scope, exc)
    return _enveloped(services, scope, result)


def _failed(
    name: str, services: Services, scope: RunScope | None, exc: Exception
) -> dict[str, Any] | Response:
    if not _expected(exc):
        log.exception("job %s failed", name)
    return job_failure(exc, lambda text: scrub(services, text, scope))


def _expected(exc: Exception) -> bool:
    """A failure the caller's request explains (no session of that id, a conflict): answered,
    not logged as a fault. Ours are those whose ``/api/v1`` status is below 500."""
    if isinstance(exc, EXPECTED_FAILURES):
        return True
    return isinstance(exc, RunyardError) and api_rule(type(exc)).status < 500


def _enveloped(services: Services, scope: RunScope | None, result: JobResult) -> dict[str, Any]:
    answer, success, *rest = result
    return job_response(scrub(services, answer, scope), success, rest[0] if rest else None)


def _recovered(services: Services, mark: str) -> dict[str, Any] | None:
    """The submit answer of the task a crashed first attempt made, as a Job envelope."""
    handle = find_keyed_task(services, mark)
    return job_response(handle, True) if handle is not None else None


def _request_body(model: type[BaseModel]) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"required": True, "content": {"application/json": {"schema": ref}}}


def _component_schemas(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    defs = schema.pop("$defs", {})
    return {model.__name__: schema, **defs}
