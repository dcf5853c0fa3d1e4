"""The ASGI app: Task Job API, agent-run API, Studio, health — one server, one workspace.

>>> app = create_app(Settings.load())
>>> # uvicorn.run(app, host="127.0.0.1", port=8765)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Response
from fastapi.openapi.utils import get_openapi
from starlette.concurrency import run_in_threadpool
from starlette.middleware.cors import CORSMiddleware

from runyard.api.auth import BearerAuth
from runyard.api.docs_page import mount_docs
from runyard.api.envelope import job_response
from runyard.api.errormap import family_handler
from runyard.api.exactroutes import ExactRoutes
from runyard.api.guard import HostPolicy, RequestGuard
from runyard.api.lifespan import run_beside
from runyard.api.mcp_lazy import mount_lazy_mcp
from runyard.api.metrics import install_metrics
from runyard.api.mlflow.routes import build_mlflow_router
from runyard.api.pathlimits import PathLimits
from runyard.api.routes_files import build_files_router
from runyard.api.routes_gc import mount_gc
from runyard.api.routes_jobs import build_jobs_router
from runyard.api.routes_login import build_login_router
from runyard.api.routes_pipelines import build_pipelines_router
from runyard.api.routes_plugins import build_plugins_router
from runyard.api.routes_preview import build_preview_router
from runyard.api.routes_runs import build_runs_router
from runyard.api.routes_schedules import mount_schedules
from runyard.api.routes_staged_files import mount_staged_files
from runyard.api.routes_sync import mount_sync
from runyard.api.routes_tasks import build_tasks_router
from runyard.api.routes_tracking import build_tracking_router
from runyard.api.services import Services
from runyard.api.startup import Startup, StartupGate
from runyard.api.storage import health_answer
from runyard.api.studio import mount_studio
from runyard.config import Settings
from runyard.errors import ConfigError, RunyardError
from runyard.runtime.leftovers import LeftoverSweep


def runyard_version() -> str:
    try:
        return version("runyard")
    except PackageNotFoundError:
        return "0+unknown"


def create_app(settings: Settings, services: Services | None = None) -> FastAPI:
    services = services or Services.build(settings)
    _check_job_api_host(settings, services)
    hub = services.changes
    startup = Startup(services)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        startup.begin()  # in the background: the port opens now (see api/startup.py)
        hub.follow(services.repository)
        app.state.metrics.attach()
        try:
            async with app.state.mcp.run():
                yield
        finally:
            app.state.metrics.detach()
            hub.unfollow()
            await run_in_threadpool(startup.join)
            await run_in_threadpool(services.stop)

    # /docs is ours (docs_page: Swagger UI shipped in the package); ReDoc would load a CDN
    app = FastAPI(
        title="runyard",
        version=runyard_version(),
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.services = services
    services.repository.set_overlay(services.supervisor.unwritten_status)
    app.state.hub = hub
    # every route's family errors answer through the one table (api/errormap.py)
    app.add_exception_handler(RunyardError, family_handler)

    @app.get("/health", tags=["health"])
    async def health(response: Response, ready: bool = False) -> dict[str, Any]:
        """``?ready=1``: 503 until the start-up is over (a readiness probe's httpGet)."""
        answer = health_answer(services)
        indexing = startup.indexing()
        if indexing is not None:
            answer["indexing"] = indexing
            if ready:
                response.status_code = 503
        return job_response(answer, True)

    router, schemas = build_jobs_router(services, hub)
    app.router.routes.append(ExactRoutes(router.routes))  # /jobs/<name> without 30 matches
    app.include_router(router)
    app.include_router(build_files_router(services), prefix="/api/v1")
    app.include_router(build_preview_router(services), prefix="/api/v1")
    app.include_router(build_runs_router(services), prefix="/api/v1")
    app.include_router(build_tasks_router(services), prefix="/api/v1")
    app.include_router(build_tracking_router(services), prefix="/api/v1")
    app.include_router(build_login_router(services), prefix="/api/v1")
    app.include_router(build_plugins_router(services), prefix="/api/v1")
    app.include_router(build_pipelines_router(services), prefix="/api/v1")
    app.include_router(build_mlflow_router(services), prefix="/mlflow")  # MLflow's client
    mount_sync(app, services)
    mount_staged_files(app, services)  # AxonX's POST/DELETE /files
    if services.agents is not None:
        from runyard.api.agents import build_agents_router

        app.include_router(build_agents_router(services), prefix="/api/v1")
    mount_gc(app, services)
    mount_schedules(app, services, startup)
    # what crashes left in staging and temp names, once the start-up is over (in a thread)
    sweep = LeftoverSweep(services.workspace, startup.ready)
    run_beside(app, sweep.start, sweep.stop)
    app.state.mcp = mount_lazy_mcp(app, services, hub, runyard_version())  # SDK: imported later
    startup.when_ready(app.state.mcp.start_soon)  # its build would slow the start-up
    mount_docs(app)
    mount_studio(app)
    _install_openapi(app, schemas)
    app.add_middleware(StartupGate, startup=startup)  # inside auth, as the next one
    app.add_middleware(PathLimits)  # inside auth: a stranger gets a 401 first
    app.add_middleware(
        BearerAuth,
        token=settings.token,
        verify_run_token=run_token_verifier(services),
        verify_browser_session=services.browser_sessions.valid,
    )
    _install_browser_safety(app, settings)
    app.state.metrics = install_metrics(app, services)  # outermost: times refusals too
    return app


def _install_browser_safety(app: FastAPI, settings: Settings) -> None:
    """The guard outermost; CORS (only for configured origins) inside it, before auth,
    so a preflight of an allowed origin is answered without a token."""
    if settings.allowed_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.allowed_origins,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=["authorization", "content-type", "last-event-id", "range"],
        )
    app.add_middleware(
        RequestGuard,
        hosts=HostPolicy.for_settings(settings),
        allowed_origins=settings.allowed_origins,
    )


def _check_job_api_host(settings: Settings, services: Services) -> None:
    """Runs given the Job API's URL send its host as ``Host``: it must be one of ours."""
    url = services.agents.job_api_url if services.agents is not None else None
    if url is None:
        return
    host = urlsplit(url).netloc
    if not HostPolicy.for_settings(settings).accepts(host):
        raise ConfigError(
            f"kubernetes.job_api_url {url} names a host this server refuses ({host}), so "
            "every call of a run would be refused: add it to allowed_hosts"
        )


def run_token_verifier(services: Services) -> Any:
    agents = services.agents
    return agents.verify_run_token if agents is not None else None


def _install_openapi(app: FastAPI, schemas: dict[str, Any]) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = get_openapi(title=app.title, version=app.version, routes=app.routes)
            spec.setdefault("components", {}).setdefault("schemas", {}).update(schemas)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
