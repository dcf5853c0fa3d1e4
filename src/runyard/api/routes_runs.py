"""``GET /api/v1/tasks/{task_id}/runs``: a task's current run and the earlier runs kept
when fixed-name reruns replaced it (:mod:`runyard.workspace.history`).

Answer::

    {"task_id": "base#demo#x",
     "runs": [{"run_id", "state", "created_at", "started_at", "finished_at",
               "exit_code", "error", "current": true|false}, ...]}

newest first, the current run first of all. A run token sees only its own session's
tasks: any other answers 404 exactly as a missing task does. A malformed id answers 400,
so no id can name a folder outside the workspace's type folders.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from runyard.api.jobs import current_status
from runyard.api.scopes import request_scope
from runyard.api.services import Services
from runyard.api.taskrefs import resolve_ref
from runyard.workspace.history import kept_runs, runs_answer


def task_runs(services: Services, task_id: str, scope: Any) -> dict[str, Any]:
    """The answer; raises InvalidInput for a bad id, TaskNotFound for an unseen task,
    AmbiguousTaskId for a task name of several tasks (``task_id`` is any reference)."""
    task_id = resolve_ref(services, task_id, scope)
    current = current_status(services, task_id, scope)
    return runs_answer(task_id, current, kept_runs(services.workspace, task_id))


def build_runs_router(services: Services) -> APIRouter:
    router = APIRouter(tags=["task runs"])

    @router.get("/tasks/{task_id}/runs", name="task_runs")
    async def runs(request: Request, task_id: str) -> Any:
        return await run_in_threadpool(task_runs, services, task_id, request_scope(request))

    return router
