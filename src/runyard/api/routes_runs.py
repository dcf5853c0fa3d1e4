"""``GET /api/v1/tasks/{task_id}/runs``: a task's current run and the earlier runs kept
when fixed-name reruns or retries replaced it (:mod:`runyard.workspace.history`).

Answer::

    {"task_id": "base#demo#x",
     "runs": [{"run_id", "state", "created_at", "started_at", "finished_at",
               "exit_code", "error", "current": true|false, "params": {...},
               "metrics": {name: summary}}, ...]}

newest first, the current run first of all. ``GET .../runs/{run_id}`` answers one run
with its result and files, ``GET .../runs/{run_id}/files/{path}`` streams one of its files
as ``GET /api/v1/tasks/{id}/files/{path}`` does (:mod:`runyard.api.run_view`). A run token
sees only its own session's tasks: any other answers 404 exactly as a missing task does. A
malformed id answers 400, so no id can name a folder outside the workspace's type folders.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from runyard.api.downloads import download
from runyard.api.jobs import current_status
from runyard.api.run_view import open_run_path, run_answer, tracking_of
from runyard.api.scopes import request_scope
from runyard.api.services import Services
from runyard.api.taskrefs import resolve_ref, resolve_ref_async
from runyard.workspace.history import kept_runs, run_dir, runs_answer


def task_runs(services: Services, task_id: str, scope: Any) -> dict[str, Any]:
    """The answer; raises InvalidInput for a bad id, TaskNotFound for an unseen task,
    AmbiguousTaskId for a task name of several tasks (``task_id`` is any reference)."""
    task_id = resolve_ref(services, task_id, scope)
    current = current_status(services, task_id, scope)
    kept = kept_runs(services.workspace, task_id)
    answer = runs_answer(task_id, current, kept)
    statuses = {s.run_id: s for s in [*kept, current]}
    for run in answer["runs"]:
        folder = run_dir(services.workspace, task_id, run["run_id"])
        run.update(tracking_of(statuses[run["run_id"]], folder))
    return answer


def build_runs_router(services: Services) -> APIRouter:
    router = APIRouter(tags=["task runs"])

    @router.get("/tasks/{task_id}/runs", name="task_runs")
    async def runs(request: Request, task_id: str) -> Any:
        return await run_in_threadpool(task_runs, services, task_id, request_scope(request))

    @router.get("/tasks/{task_id}/runs/{run_id}", name="task_run")
    async def one_run(request: Request, task_id: str, run_id: str) -> Any:
        scope = request_scope(request)
        task_id = await resolve_ref_async(services, task_id, scope)
        return await run_in_threadpool(run_answer, services, task_id, run_id, scope)

    @router.get("/tasks/{task_id}/runs/{run_id}/files/{path:path}", name="task_run_file")
    async def run_file(request: Request, task_id: str, run_id: str, path: str) -> Any:
        scope = request_scope(request)
        task_id = await resolve_ref_async(services, task_id, scope)
        opened = await run_in_threadpool(open_run_path, services, task_id, run_id, path, scope)
        return download(opened)

    return router
