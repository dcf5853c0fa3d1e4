"""``/api/v1/schedules``: cron schedules that submit task runs (admin token only).

| method and path | what |
|---|---|
| ``GET /schedules`` | ``{"items": [schedule, ...]}`` (:mod:`runyard.schedules.describe`) |
| ``POST /schedules`` ``{name, job, cron, ...}`` | make one (201); kept in the workspace |
| ``GET /schedules/{name}?history_limit=20`` | one, with its recent history |
| ``GET /schedules/{name}/history?limit=50`` | ``{"name", "history", "total"}`` |
| ``DELETE /schedules/{name}`` | delete one made over the API (a configured one: 422) |
| ``POST /schedules/{name}/pause`` · ``/resume`` | stop and restart its ticks |
| ``POST /schedules/{name}/trigger`` | a run now, under its concurrency policy: the record |
| ``POST /schedules/{name}/backfill`` ``{from, to}`` | a run per tick in the range |

A run token gets 403 on every one: schedules submit as the server, and their history
names tasks of every submitter. A bad body, cron expression or time zone is a 422
``invalid_schedule``; an unknown name a 404.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, FastAPI, Query, Request
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from runyard.api.lifespan import run_beside
from runyard.api.requestbody import read_json_body
from runyard.api.scopes import request_scope
from runyard.api.services import Services
from runyard.api.startup import Startup
from runyard.errors import Forbidden, InvalidInput, InvalidSchedule, UnknownTask
from runyard.schedule_settings import ScheduleSettings
from runyard.schedules.describe import MAX_HISTORY_LIMIT, describe, describe_all
from runyard.schedules.firing import Actions
from runyard.schedules.scheduler import Scheduler
from runyard.schedules.store import ScheduleStore

log = logging.getLogger("runyard.schedules")


def build_scheduler(services: Services) -> Scheduler:
    """The server's scheduler: its runs go through the supervisor's submit, as the Job
    API's do, with ``submitted_by`` ``schedule:<name>``."""

    def submit(task: str, inputs: dict[str, Any], submitted_by: str) -> dict[str, Any]:
        services.read_only.refuse("submit a scheduled run")
        return services.supervisor.submit(task, inputs, submitted_by).model_dump(mode="json")

    def state_of(task_id: str) -> str | None:
        status = services.workspace.read_status(task_id)
        return status.state if status is not None else None

    actions = Actions(submit, state_of, services.supervisor.cancel)
    wait = services.settings.cancel_grace_seconds + 5.0
    store = ScheduleStore(services.workspace.root)
    return Scheduler(services.settings.schedules, store, actions, cancel_wait=wait)


def require_admin(request: Request) -> None:
    if request_scope(request) is not None:
        raise Forbidden("Schedules need the server (admin) token")


def settings_from(services: Services, body: Any) -> tuple[str, ScheduleSettings]:
    """The name and settings of a create body; InvalidSchedule says what is wrong."""
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        raise InvalidSchedule("The body must be a JSON object with a string 'name'")
    fields = {k: v for k, v in body.items() if k != "name"}
    try:
        settings = ScheduleSettings.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidSchedule(f"Invalid schedule: {problems}") from None
    try:
        services.registry.get(settings.task)
    except UnknownTask as exc:
        raise InvalidSchedule(f"The schedule's task: {exc}") from None
    return body["name"], settings


def _range(body: Any) -> tuple[str, str]:
    if not isinstance(body, dict) or set(body) != {"from", "to"}:
        raise InvalidSchedule('The body must be {"from": <ISO time>, "to": <ISO time>}')
    if not all(isinstance(body[k], str) for k in ("from", "to")):
        raise InvalidSchedule("'from' and 'to' must be ISO-8601 times")
    return body["from"], body["to"]


def _limit(value: int, name: str) -> int:
    if not 1 <= value <= MAX_HISTORY_LIMIT:
        raise InvalidInput(f"{name} must be between 1 and {MAX_HISTORY_LIMIT}")
    return value


def build_schedules_router(services: Services, scheduler: Scheduler) -> APIRouter:
    router = APIRouter(tags=["schedules"])
    limit_bytes = services.settings.max_body_bytes

    def one(name: str, history_limit: int = 20) -> dict[str, Any]:
        with scheduler.lock:
            entry = scheduler.entry(name)
            return describe(scheduler, entry, include_history=True, history_limit=history_limit)

    @router.get("/schedules")
    async def list_schedules(request: Request) -> Any:
        require_admin(request)
        return {"items": await run_in_threadpool(describe_all, scheduler)}

    @router.post("/schedules", status_code=201)
    async def create_schedule(request: Request) -> Any:
        require_admin(request)
        name, settings = settings_from(services, await read_json_body(request, limit_bytes))
        await run_in_threadpool(scheduler.create, name, settings)
        return await run_in_threadpool(one, name)

    @router.get("/schedules/{name}")
    async def get_schedule(request: Request, name: str, history_limit: int = 20) -> Any:
        require_admin(request)
        return await run_in_threadpool(one, name, _limit(history_limit, "history_limit"))

    @router.get("/schedules/{name}/history")
    async def schedule_history(request: Request, name: str, limit: int = Query(50)) -> Any:
        require_admin(request)
        answer = await run_in_threadpool(one, name, _limit(limit, "limit"))
        return {"name": name, "history": answer["history"], "total": answer["history_total"]}

    @router.delete("/schedules/{name}")
    async def delete_schedule(request: Request, name: str) -> Any:
        require_admin(request)
        await run_in_threadpool(scheduler.delete, name)
        return {"deleted": name}

    @router.post("/schedules/{name}/pause")
    async def pause_schedule(request: Request, name: str) -> Any:
        require_admin(request)
        await run_in_threadpool(scheduler.set_paused, name, True)
        return await run_in_threadpool(one, name)

    @router.post("/schedules/{name}/resume")
    async def resume_schedule(request: Request, name: str) -> Any:
        require_admin(request)
        await run_in_threadpool(scheduler.set_paused, name, False)
        return await run_in_threadpool(one, name)

    @router.post("/schedules/{name}/trigger")
    async def trigger_schedule(request: Request, name: str) -> Any:
        require_admin(request)
        return await run_in_threadpool(scheduler.trigger, name)

    @router.post("/schedules/{name}/backfill")
    async def backfill_schedule(request: Request, name: str) -> Any:
        require_admin(request)
        first, last = _range(await read_json_body(request, limit_bytes))
        records = await run_in_threadpool(scheduler.backfill, name, first, last)
        return JSONResponse({"name": name, "records": records})

    return router


def mount_schedules(app: FastAPI, services: Services, startup: Startup) -> None:
    """The routes, and the scheduler: started once the server's start-up is over (the
    supervisor has reconciled, so a catch-up run joins a live queue), stopped first."""
    scheduler = build_scheduler(services)
    scheduler.load()  # answers know every schedule from the first request on
    for name, settings in services.settings.schedules.items():
        try:
            services.registry.get(settings.task)
        except UnknownTask as exc:  # its ticks are recorded failed, saying the same
            log.error("schedule %s cannot run: %s", name, exc)
    services.schedules = scheduler
    app.include_router(build_schedules_router(services, scheduler), prefix="/api/v1")
    startup.when_ready(scheduler.start)
    run_beside(app, lambda: None, scheduler.stop)
