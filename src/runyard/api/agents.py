"""HTTP routes of the agent-run backend, mounted at ``/api/v1`` (DESIGN section 6).

camelCase JSON; lists answer ``{"items": [...], "nextCursor": null|string}``; errors answer
``{"error": {"code": "...", "message": "..."}}`` with 400/403/404/409/413/422. The error
shape is installed on these routes only (the Job API keeps ``{"detail": ...}``). A request
authenticated by a run token reaches only that run's own session.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from runyard.agents.errors import BadRequest, UploadTooLarge
from runyard.agents.layout import list_output_files, open_output, open_upload
from runyard.agents.models import (
    MountGrant,
    Page,
    RunScope,
    RunSummary,
    SessionStatus,
    new_id,
    to_wire,
)
from runyard.agents.packages import available_packages, resolve_package
from runyard.agents.runs import RunRequest
from runyard.api.agentservice import AgentService
from runyard.api.downloads import download
from runyard.api.errormap import (
    api_error_response,
    http_exception_response,
    validation_error_response,
)
from runyard.api.idempotent import caller_route, find_reserved, reserved_id, run_once
from runyard.api.requestbody import read_json_body
from runyard.api.run_stream import RunCursor, run_events, run_stream_source
from runyard.api.services import Services
from runyard.api.sse import sse_response
from runyard.api.uploads import receive_upload
from runyard.errors import RunyardError
from runyard.workspace.space import is_space_error, require_space, storage_error

log = logging.getLogger("runyard.api.agents")
# where a run sees its session's folders: run tokens get these instead of host paths
SANDBOX_STATE_DIR = "/workspace/state"
SANDBOX_MOUNTS_DIR = "/workspace/mounts"
UPLOAD_SLACK = 1 << 20  # multipart framing and the small fields around the file


class AgentRoute(APIRoute):
    """A route whose failures answer the agent API's error shape: family errors through the
    app's handler (:mod:`runyard.api.errormap`), the shared helpers' HTTPExceptions and a
    full disk here."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return validation_error_response(_describe(exc.errors()))
            except HTTPException as exc:
                return http_exception_response(exc, _detail(exc.detail))
            except RunyardError:
                raise
            except Exception as exc:
                if not is_space_error(exc):  # sqlite3's "database or disk is full", ENOSPC
                    raise
                log.warning(
                    "%s %s refused, the disk is full: %s", request.method, request.url.path, exc
                )
                raise storage_error(exc, "complete this request") from exc

        return guarded


def _require_room(services: Services) -> None:
    services.read_only.refuse()  # 507 on a full disk (api/readonly.py)
    require_space(services.workspace.root, services.settings.min_free_mb)


class _Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=False, extra="forbid")


class SessionCreate(_Body):
    title: str | None = None


class GrantCreate(_Body):
    session_id: str
    name: str
    host_path: str
    access: str = "ro"


class ForkCreate(_Body):
    run_id: str
    title: str | None = None


class RestoreRequest(_Body):
    run_id: str


class RunCreate(_Body):
    session_id: str
    user_prompt: str
    system_prompt: str | None = None
    artifact_ids: list[str] | None = Field(None, description="Default: all of the session's")
    mount_grant_ids: list[str] | None = Field(None, description="Default: all active grants")
    package: str | None = None
    enqueue: bool = False


def _describe(errors: Any) -> str:
    parts = []
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        parts.append(f"{where}: {error.get('msg')}" if where else str(error.get("msg")))
    return "; ".join(parts) or "Invalid request"


def _detail(detail: Any) -> str:
    return detail if isinstance(detail, str) else _describe(detail)


async def _body(request: Request, services: Services, model: type[_Body]) -> Any:
    data = await read_json_body(request, services.settings.max_body_bytes)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from exc


def run_scope(request: Request) -> RunScope | None:
    scope = request.scope.get("state", {}).get("run_scope")
    return scope if isinstance(scope, RunScope) else None


def _grant_wire(grant: MountGrant, scope: RunScope | None) -> dict[str, Any]:
    """A grant as its reader may see it: a run sees where it is mounted, not the host path."""
    wire: dict[str, Any] = to_wire(grant)
    if scope is not None:
        wire["hostPath"] = f"{SANDBOX_MOUNTS_DIR}/{grant.name}"
    return wire


def _page(page: Page) -> dict[str, Any]:
    return to_wire(page)


def _with_run_summaries(page: Page, summaries: dict[str, RunSummary]) -> dict[str, Any]:
    """A page of sessions, each with ``runCount`` and ``latestRunState`` (its newest run's)."""
    wire = _page(page)
    for item in wire["items"]:
        item.update(to_wire(summaries[item["id"]]))
    return wire


def _body_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True)
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def build_agents_router(services: Services) -> APIRouter:
    service = services.agents
    assert service is not None
    router = APIRouter(route_class=AgentRoute, tags=["agents"])
    _session_routes(router, services, service)
    _artifact_routes(router, services, service)
    _grant_routes(router, services, service)
    _run_routes(router, services, service)
    _run_output_routes(router, service)
    _checkpoint_routes(router, services, service)
    return router


def _session_routes(router: APIRouter, services: Services, service: AgentService) -> None:
    catalog = service.catalog

    @router.post("/sessions", status_code=201, openapi_extra=_body_schema(SessionCreate))
    async def create_session(request: Request) -> Any:
        body = await _body(request, services, SessionCreate)
        await run_in_threadpool(_require_room, services)  # statvfs: off the event loop
        session = await run_in_threadpool(catalog.create_session, body.title, run_scope(request))
        return to_wire(session)

    @router.get("/sessions")
    async def list_sessions(
        request: Request, limit: int | None = Query(None), cursor: str | None = Query(None)
    ) -> Any:
        page = await run_in_threadpool(catalog.list_sessions, limit, cursor, run_scope(request))
        ids = [session.id for session in page.items]
        return _with_run_summaries(page, await run_in_threadpool(catalog.run_summaries, ids))

    @router.get("/sessions/{session_id}")
    async def get_session(request: Request, session_id: str) -> Any:
        return to_wire(await run_in_threadpool(catalog.session, session_id, run_scope(request)))

    @router.get("/sessions/{session_id}/state")
    async def get_session_state(request: Request, session_id: str) -> Any:
        scope = run_scope(request)
        state = to_wire(await run_in_threadpool(catalog.session_state, session_id, scope))
        return state if scope is None else {**state, "path": SANDBOX_STATE_DIR}

    for action, status in (("close", SessionStatus.CLOSED), ("reopen", SessionStatus.OPEN)):
        _status_route(router, catalog, action, status)

    @router.get("/packages")
    async def list_packages(request: Request) -> Any:
        hide_paths = run_scope(request) is not None
        names = await run_in_threadpool(available_packages, services.settings)
        default = await run_in_threadpool(resolve_package, services.settings, None)
        items = []
        for name in names:
            package = await run_in_threadpool(resolve_package, services.settings, name)
            info = package.describe("" if hide_paths else str(package.path))
            items.append({**info, "default": package.path == default.path})
        return {"items": items, "nextCursor": None}


def _status_route(router: APIRouter, catalog: Any, action: str, status: SessionStatus) -> None:
    async def change(request: Request, session_id: str) -> Any:
        session = await run_in_threadpool(
            catalog.set_status, session_id, status, run_scope(request)
        )
        return to_wire(session)

    router.add_api_route(
        f"/sessions/{{session_id}}/{action}", change, methods=["POST"], name=f"{action}_session"
    )


def _artifact_routes(router: APIRouter, services: Services, service: AgentService) -> None:
    catalog = service.catalog
    limit_bytes = service.settings.upload_max_bytes

    @router.post("/artifacts/upload", status_code=201)
    async def upload(request: Request) -> Any:
        scope = run_scope(request)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit_bytes + UPLOAD_SLACK:
            raise UploadTooLarge(limit_bytes)
        await run_in_threadpool(_require_room, services)
        received = await receive_upload(
            request.stream(),
            request.headers.get("content-type"),
            lambda fields: catalog.open_upload(fields, scope),
        )
        artifact = await run_in_threadpool(catalog.finish_upload, received, scope)
        return to_wire(artifact)

    @router.get("/artifacts")
    async def list_artifacts(
        request: Request,
        session_id: str = Query(..., alias="sessionId"),
        limit: int | None = Query(None),
        cursor: str | None = Query(None),
    ) -> Any:
        scope = run_scope(request)
        page = await run_in_threadpool(catalog.list_artifacts, session_id, limit, cursor, scope)
        return _page(page)

    @router.get("/artifacts/{artifact_id}")
    async def get_artifact(request: Request, artifact_id: str) -> Any:
        return to_wire(await run_in_threadpool(catalog.artifact, artifact_id, run_scope(request)))

    @router.get("/artifacts/{artifact_id}/content")
    async def artifact_content(request: Request, artifact_id: str) -> Any:
        artifact = await run_in_threadpool(catalog.artifact, artifact_id, run_scope(request))
        opened = await run_in_threadpool(open_upload, catalog.artifact_file(artifact))
        return download(opened, artifact.file_name, artifact.media_type)


def _grant_routes(router: APIRouter, services: Services, service: AgentService) -> None:
    catalog = service.catalog

    @router.post("/mount-grants", status_code=201, openapi_extra=_body_schema(GrantCreate))
    async def create_grant(request: Request) -> Any:
        body = await _body(request, services, GrantCreate)
        grant = await run_in_threadpool(
            catalog.create_grant, body.session_id, body.name, body.host_path, body.access,
            run_scope(request),
        )  # fmt: skip
        return _grant_wire(grant, run_scope(request))

    @router.get("/mount-grants")
    async def list_grants(
        request: Request,
        session_id: str = Query(..., alias="sessionId"),
        limit: int | None = Query(None),
        cursor: str | None = Query(None),
    ) -> Any:
        scope = run_scope(request)
        page = await run_in_threadpool(catalog.list_grants, session_id, limit, cursor, scope)
        items = [_grant_wire(grant, scope) for grant in page.items]
        return {"items": items, "nextCursor": page.next_cursor}

    @router.delete("/mount-grants/{grant_id}")
    async def revoke_grant(request: Request, grant_id: str) -> Any:
        scope = run_scope(request)
        return _grant_wire(await run_in_threadpool(catalog.revoke_grant, grant_id, scope), scope)


def _run_routes(router: APIRouter, services: Services, service: AgentService) -> None:
    runs = service.runs

    @router.post("/runs", status_code=201, openapi_extra=_body_schema(RunCreate))
    async def create_run(request: Request) -> Any:
        body = await _body(request, services, RunCreate)
        scope = run_scope(request)

        async def work() -> Any:
            await run_in_threadpool(_require_room, services)
            run_id = await run_in_threadpool(reserved_id, services, lambda: new_id("run"))
            run_request = RunRequest(**body.model_dump(), run_id=run_id)
            return to_wire(await run_in_threadpool(runs.create, run_request, scope))

        def recover(marked: str) -> Any:
            run = find_reserved(services, marked, service.store.get_run)
            return None if run is None else to_wire(run)

        return await run_once(
            request, services, caller_route("api/runs", scope),
            body.model_dump(mode="json"), work, conflict=api_error_response, success_status=201,
            recover=recover,
        )  # fmt: skip

    @router.get("/runs")
    async def list_runs(
        request: Request,
        session_id: str | None = Query(None, alias="sessionId"),
        limit: int | None = Query(None),
        cursor: str | None = Query(None),
    ) -> Any:
        scope = run_scope(request)
        page = await run_in_threadpool(runs.list_runs, session_id, limit, cursor, scope)
        return _page(page)

    @router.get("/runs/{run_id}")
    async def get_run(request: Request, run_id: str) -> Any:
        return to_wire(await run_in_threadpool(runs.run, run_id, run_scope(request)))

    @router.post("/runs/{run_id}/cancel")
    async def cancel_run(request: Request, run_id: str) -> Any:
        return to_wire(await run_in_threadpool(runs.cancel, run_id, run_scope(request)))


def _run_output_routes(router: APIRouter, service: AgentService) -> None:
    runs = service.runs

    @router.get("/runs/{run_id}/files")
    async def list_files(request: Request, run_id: str) -> Any:
        run = await run_in_threadpool(runs.run, run_id, run_scope(request))
        out_dir = service.layout.run_subdir(run.id, "out")
        items = await run_in_threadpool(list_output_files, out_dir)
        return {"items": items, "nextCursor": None}

    @router.get("/runs/{run_id}/files/{path:path}")
    async def download_file(request: Request, run_id: str, path: str) -> Any:
        run = await run_in_threadpool(runs.run, run_id, run_scope(request))
        out_dir = service.layout.run_subdir(run.id, "out")
        opened = await run_in_threadpool(open_output, out_dir, path)
        return download(opened)

    @router.get("/runs/{run_id}/events")
    async def events(request: Request, run_id: str) -> Any:
        try:
            cursor = RunCursor.parse(request.headers.get("last-event-id"))
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        run = await run_in_threadpool(runs.run, run_id, run_scope(request))
        return sse_response(run_events(run_stream_source(service, run), cursor))


def _checkpoint_routes(router: APIRouter, services: Services, service: AgentService) -> None:
    checkpoints = service.checkpoints

    @router.get("/sessions/{session_id}/checkpoints")
    async def list_checkpoints(
        request: Request,
        session_id: str,
        limit: int | None = Query(None),
        cursor: str | None = Query(None),
    ) -> Any:
        scope = run_scope(request)
        page = await run_in_threadpool(checkpoints.index, session_id, limit, cursor, scope)
        return {"items": page.items, "nextCursor": page.next_cursor}

    @router.get("/sessions/{session_id}/checkpoints/{run_id}/files")
    async def checkpoint_files(request: Request, session_id: str, run_id: str) -> Any:
        scope = run_scope(request)
        items = await run_in_threadpool(checkpoints.files, session_id, run_id, scope)
        return {"items": items, "nextCursor": None}

    @router.get("/sessions/{session_id}/checkpoints/{run_id}/files/{path:path}")
    async def checkpoint_file(request: Request, session_id: str, run_id: str, path: str) -> Any:
        scope = run_scope(request)
        opened = await run_in_threadpool(checkpoints.open_file, session_id, run_id, path, scope)
        return download(opened)

    @router.post(
        "/sessions/{session_id}/fork", status_code=201, openapi_extra=_body_schema(ForkCreate)
    )
    async def fork_session(request: Request, session_id: str) -> Any:
        body = await _body(request, services, ForkCreate)
        fork = await run_in_threadpool(
            checkpoints.fork, session_id, body.run_id, body.title, run_scope(request)
        )
        return to_wire(fork)

    @router.post("/sessions/{session_id}/restore", openapi_extra=_body_schema(RestoreRequest))
    async def restore_session(request: Request, session_id: str) -> Any:
        body = await _body(request, services, RestoreRequest)
        session = await run_in_threadpool(
            checkpoints.restore, session_id, body.run_id, run_scope(request)
        )
        return to_wire(session)
