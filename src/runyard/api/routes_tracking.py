"""Reading and comparing tracked runs over ``/api/v1`` (:mod:`runyard.tracking.views`).

``GET /api/v1/tasks/{task_id}/metrics?run_id=&name=&max_points=``::

    {"task_id": "base#fit#ridge",
     "runs": [{"run_id", "current": true, "state": "succeeded",
               "metrics": {"cv_r2": {"steps": [...], "values": [...], "times": [...]}}}]}

every run (the current one first, then the kept ones newest first) unless ``run_id``
names one; ``name`` keeps one metric; ``max_points`` (2-10000) thins each series.

``GET /api/v1/compare?id=<ref>&id=<ref>...`` (2-20 refs; a ref is a task id, name or
``type:task:name``, ``@<run_id>`` for an earlier run)::

    {"items": [{"task_id", "run_id", "state", "params", "metrics"}],
     "params": [{"name", "values": [...], "differs": bool}],   # differing ones first
     "metrics": [{"name", "values": [summary or null, ...]}]}

A run token sees only its own session's tasks: any other answers 404 as a missing one
does. A bad query value answers 400 ``invalid_query``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import QueryParams

from runyard.agents.models import RunScope
from runyard.api.jobs import current_status
from runyard.api.scopes import request_scope
from runyard.api.services import Services
from runyard.api.taskrefs import resolve_ref
from runyard.tracking.views import (
    TrackedRun,
    check_compare_count,
    check_max_points,
    compare_answer,
    metrics_answer,
    split_ref,
    task_runs,
)


def task_metrics(
    services: Services, task_ref: str, query: QueryParams, scope: RunScope | None
) -> dict[str, Any]:
    """The metrics answer; raises InvalidInput for a bad query, TaskNotFound and
    RunNotFound for what the caller cannot see, AmbiguousTaskId for a name of several."""
    max_points = check_max_points(query.get("max_points"))
    name = query.get("name") or None
    run_id = query.get("run_id") or None
    task_id = resolve_ref(services, task_ref, scope)
    current = current_status(services, task_id, scope)
    runs = task_runs(services.workspace, task_id, current, run_id)
    return metrics_answer(task_id, runs, name=name, max_points=max_points)


def compare_runs(services: Services, refs: list[str], scope: RunScope | None) -> dict[str, Any]:
    """The compare answer of ``refs``; errors as :func:`task_metrics`."""
    check_compare_count(refs)
    return compare_answer([_one_run(services, ref, scope) for ref in refs])


def _one_run(services: Services, ref: str, scope: RunScope | None) -> TrackedRun:
    task_ref, run_id = split_ref(ref)
    task_id = resolve_ref(services, task_ref, scope)
    current = current_status(services, task_id, scope)
    return task_runs(services.workspace, task_id, current, run_id or current.run_id)[0]


def build_tracking_router(services: Services) -> APIRouter:
    router = APIRouter(tags=["tracking"])

    @router.get("/tasks/{task_id}/metrics", name="task_metrics")
    async def metrics(request: Request, task_id: str) -> Any:
        scope = request_scope(request)
        query = request.query_params
        return await run_in_threadpool(task_metrics, services, task_id, query, scope)

    @router.get("/compare", name="compare_runs")
    async def compare(request: Request) -> Any:
        refs = request.query_params.getlist("id")
        scope = request_scope(request)
        return await run_in_threadpool(compare_runs, services, refs, scope)

    return router
