"""``POST /api/v1/gc``: garbage collection by the server that owns the workspace (admin only).

Body (JSON, all optional): ``{"dryRun": false, "includeUpstreams": false}``. Answers the
report: ``{"dry_run", "tasks", "logs", "run_workspaces", "uploads", "kept_upstreams",
"bytes", "history", "blobs"}`` (``blobs``: the sha256 of stored files of kept runs that no
kept run names any more). A run token gets 403. Tasks are deleted through the server's
supervisor, so a server-side record of each goes with it and active tasks are refused again
at deletion.

With ``retention`` configured (``max_age_days`` or ``keep_last_per_task``) the server also
collects every ``retention.interval_seconds``, from start to shutdown.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request
from starlette.concurrency import run_in_threadpool

from runyard.api.lifespan import run_beside
from runyard.api.requestbody import read_json_body
from runyard.api.scopes import request_scope
from runyard.api.services import Services
from runyard.errors import Forbidden, InvalidInput
from runyard.retention import GcContext, collect
from runyard.retention.periodic import PeriodicCollector

OPTIONS = ("dryRun", "includeUpstreams")


def gc_context(services: Services) -> GcContext:
    agents = services.agents
    return GcContext(
        workspace=services.workspace,
        repository=services.repository,
        delete=services.supervisor.delete,
        policy=services.settings.retention,
        agent_layout=agents.layout if agents is not None else None,
        agent_store=agents.store if agents is not None else None,
    )


def _options(body: Any) -> dict[str, bool]:
    """The two flags; InvalidInput says what is wrong with the body (422 invalid_request)."""
    if not isinstance(body, dict):
        raise InvalidInput("The body must be a JSON object")
    unknown = sorted(set(body) - set(OPTIONS))
    if unknown:
        raise InvalidInput(f"Unknown field(s) {', '.join(unknown)}; allowed: {', '.join(OPTIONS)}")
    if any(not isinstance(body.get(name, False), bool) for name in OPTIONS):
        raise InvalidInput("dryRun and includeUpstreams must be true or false")
    return {name: bool(body.get(name, False)) for name in OPTIONS}


def build_gc_router(services: Services, context: GcContext) -> APIRouter:
    router = APIRouter(tags=["retention"])

    @router.post("/gc")
    async def gc(request: Request) -> Any:
        if request_scope(request) is not None:
            raise Forbidden("Garbage collection needs the server (admin) token")
        options = _options(await read_json_body(request, services.settings.max_body_bytes))
        report = await run_in_threadpool(
            collect,
            context,
            dry_run=options["dryRun"],
            include_upstreams=options["includeUpstreams"],
        )
        return report.to_json()

    return router


def mount_gc(app: FastAPI, services: Services) -> None:
    """Add the route, and the periodic collection to the app's lifespan when configured."""
    context = gc_context(services)
    app.include_router(build_gc_router(services, context), prefix="/api/v1")
    policy = services.settings.retention
    if not policy.periodic:
        return
    collector = PeriodicCollector(context, policy.interval_seconds)
    run_beside(app, collector.start, collector.stop)
