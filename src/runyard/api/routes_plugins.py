"""The plugin catalogue of a running server.

``GET /api/v1/plugins`` answers a :class:`~runyard.wire.PluginReport`: the task
names, the plugins that did not load and why, and the tasks only a restart brings up to
date; like listing the definitions it looks for new plugins first, at most once a second.
``POST /api/v1/plugins/rescan`` (admin only; a run token gets 403) looks at once, reading
the ``.pth`` files installed since the last look, and names the tasks it ``added``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from runyard.api.scopes import request_scope
from runyard.api.services import Services
from runyard.errors import Forbidden


def build_plugins_router(services: Services) -> APIRouter:
    router = APIRouter(tags=["plugins"])
    registry = services.registry

    @router.get("/plugins")
    async def plugins() -> Any:
        await run_in_threadpool(registry.rescan)
        return registry.report().model_dump()

    @router.post("/plugins/rescan")
    async def rescan(request: Request) -> Any:
        if request_scope(request) is not None:
            raise Forbidden("Rescanning the plugins needs the server (admin) token")
        added = await run_in_threadpool(registry.rescan, force=True)
        return registry.report(added).model_dump()

    return router
