"""``/api/v1/pipelines/runs``: pipeline runs made in one request, all or nothing.

- ``POST /pipelines/runs``: a run of the pipeline in the body (the wire form of
  :meth:`runyard.pipelines.build.Pipeline.wire`), every step made with its ``depends_on``;
  answers the run.
- ``GET /pipelines/runs?limit=``: ``{"items": [run, ...], "total": N}``, newest first
  (``limit`` 1-1000, default 50).
- ``GET /pipelines/runs/{id}``: the run, ``{id, pipeline, params, created_at, state,
  steps: [{key, task, task_id, depends_on, state, run_id, created_at, started_at,
  finished_at, error, waiting_for}]}``.
- ``POST /pipelines/runs/{id}/cancel``: cancels its unfinished steps; the run and
  ``cancelled`` (the task ids this call cancelled).

A create with an ``Idempotency-Key`` header is made once: a retry with the same key and
body answers the first run (also after a crash cut the first answer short), another body
409. A request refused whole answers 422 ``invalid_pipeline`` with the step at fault named in
its message, and nothing is made. Auth and scopes are the submit's: a run
token's pipeline steps are its session's tasks, and it sees (and cancels) only its session's
runs; another's answers 404 as a missing one does.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from runyard.agents.models import RunScope
from runyard.api.errormap import api_error_response
from runyard.api.idempotency import current_key
from runyard.api.idempotent import caller_route, find_reserved, reserved_id, run_once_in_thread
from runyard.api.requestbody import read_json_body
from runyard.api.scopes import request_scope, scrub, submitter_for
from runyard.api.services import Services
from runyard.errors import InvalidInput, PipelineRunNotFound
from runyard.runtime.pipelines.records import PipelineRun, list_runs, new_run_id, read_run
from runyard.runtime.pipelines.runs import cancel_run, pipeline_name, run_view, start_run

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000


def visible_run(services: Services, run_id: str, scope: RunScope | None) -> PipelineRun:
    """The run ``run_id`` as ``scope`` may see it; another session's is not found."""
    run = read_run(services.workspace, run_id)
    if scope is not None and run.session() != scope.session_id:
        raise PipelineRunNotFound(run_id)
    return run


def _limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    value = int(raw) if raw.isdigit() else 0
    if not 1 <= value <= MAX_LIMIT:
        raise InvalidInput(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {raw!r}")
    return value


def _create(services: Services, body: Any, scope: RunScope | None) -> dict[str, Any]:
    services.read_only.refuse("start a pipeline run")
    keyed = current_key.get() is not None  # the run's id is kept with the key, made first
    run_id = reserved_id(services, lambda: new_run_id(pipeline_name(body))) if keyed else None
    run = start_run(services.supervisor, body, submitter_for(scope), run_id)
    return scrub(services, run_view(services.workspace, run), scope)


def _recovered(services: Services, marked: str, scope: RunScope | None) -> Any:
    """The run a keyed request made before a crash cut it short, or None."""

    def lookup(run_id: str) -> Any:
        try:
            run = read_run(services.workspace, run_id)
        except PipelineRunNotFound:
            return None
        return scrub(services, run_view(services.workspace, run), scope)

    return find_reserved(services, marked, lookup)


def _listing(services: Services, limit: int, scope: RunScope | None) -> dict[str, Any]:
    runs = list_runs(services.workspace)
    if scope is not None:
        runs = [run for run in runs if run.session() == scope.session_id]
    items = [run_view(services.workspace, run) for run in runs[:limit]]
    return {"items": items, "total": len(runs)}


def _cancel(services: Services, run_id: str, scope: RunScope | None) -> dict[str, Any]:
    run = visible_run(services, run_id, scope)
    cancelled = cancel_run(services.supervisor, run)
    return {**run_view(services.workspace, run), "cancelled": cancelled}


def build_pipelines_router(services: Services) -> APIRouter:
    router = APIRouter(tags=["pipelines"])

    @router.post("/pipelines/runs", name="pipeline_run_create")
    async def create(request: Request) -> Any:
        """Made once per Idempotency-Key: a retry answers the first request's run."""
        scope = request_scope(request)
        body = await read_json_body(request, services.settings.max_body_bytes)
        return await run_once_in_thread(
            request, services, caller_route("api/pipelines/runs", scope), body,
            lambda: _create(services, body, scope), conflict=api_error_response,
            recover=lambda marked: _recovered(services, marked, scope),
        )  # fmt: skip

    @router.get("/pipelines/runs", name="pipeline_runs")
    async def listing(request: Request) -> Any:
        scope = request_scope(request)
        limit = _limit(request.query_params.get("limit"))
        answer = await run_in_threadpool(_listing, services, limit, scope)
        return scrub(services, answer, scope)

    @router.get("/pipelines/runs/{run_id}", name="pipeline_run")
    async def one(request: Request, run_id: str) -> Any:
        scope = request_scope(request)
        run = await run_in_threadpool(visible_run, services, run_id, scope)
        answer = await run_in_threadpool(run_view, services.workspace, run)
        return scrub(services, answer, scope)

    @router.post("/pipelines/runs/{run_id}/cancel", name="pipeline_run_cancel")
    async def cancel(request: Request, run_id: str) -> Any:
        scope = request_scope(request)
        answer = await run_in_threadpool(_cancel, services, run_id, scope)
        return scrub(services, answer, scope)

    return router
