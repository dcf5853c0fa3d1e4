"""MCP resources: task records (status, metadata, artifacts, log windows) and task definitions.

URIs (the task id percent-encoded, ``#`` as ``%23``; a raw ``#`` is accepted too)::

    runyard://definitions/{task}                          a task definition + input schema
    runyard://tasks/{task_id}/status                      TaskStatus (JSON)
    runyard://tasks/{task_id}/metadata                    metadata.json (JSON)
    runyard://tasks/{task_id}/log{?offset,limit}          a TaskLogChunk (JSON)
    runyard://tasks/{task_id}/artifacts/{+path}           a file of the task folder

Every read applies the caller's run scope as the Job API does: another session's task
answers as a missing one, host paths are removed. Artifacts are opened once under the task
folder without following a symlink (:func:`runyard.workspace.safefs.open_under`) and read
from that descriptor; text comes back as text, anything else as a base64 blob.
"""

from __future__ import annotations

import base64
import json
import mimetypes
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

import mcp.types as types
from mcp.shared.exceptions import MCPError
from starlette.concurrency import run_in_threadpool

from runyard.agents.models import RunScope
from runyard.api.envelope import error_answer
from runyard.api.jobs import current_status
from runyard.api.scopes import require_visible, scrub
from runyard.api.services import Services
from runyard.api.taskrefs import resolve_ref_async
from runyard.api.unwritten import missing_file
from runyard.errors import NoSuchFile, RunyardError, TaskNotFound
from runyard.runtime.submitters import log_to_read
from runyard.workspace.logs import DEFAULT_LIMIT, MAX_LIMIT, MIN_LIMIT, read_log_window
from runyard.workspace.safefs import OpenedFile, open_under

SCHEME = "runyard://"
MAX_ARTIFACT_BYTES = 8 * 1024 * 1024  # larger files: GET /api/v1/tasks/{id}/files/{path}
TEMPLATES = (
    ("task status", "runyard://tasks/{task_id}/status", "application/json"),
    ("task metadata", "runyard://tasks/{task_id}/metadata", "application/json"),
    ("task log window", "runyard://tasks/{task_id}/log{?offset,limit}", "application/json"),
    ("task artifact", "runyard://tasks/{task_id}/artifacts/{+path}", None),
)


def resource_templates() -> list[types.ResourceTemplate]:
    return [
        types.ResourceTemplate(
            name=name,
            uri_template=template,
            mime_type=mime,
            description="task_id as type:task:name (or '#' as %23), or a unique task name; "
            + _ABOUT[name],
        )
        for name, template, mime in TEMPLATES
    ]


_ABOUT = {
    "task status": "the task's current TaskStatus",
    "task metadata": "the task's metadata.json (inputs, outputs, lineage)",
    "task log window": f"a byte window of the log: offset -1 reads the tail, limit "
    f"{MIN_LIMIT}..{MAX_LIMIT} (default {DEFAULT_LIMIT})",
    "task artifact": f"a file of the task folder by relative path, up to {MAX_ARTIFACT_BYTES} "
    "bytes (text or base64 blob)",
}


def definition_resources(services: Services) -> list[types.Resource]:
    """One resource per installed task definition: its description and input schema."""
    return [
        types.Resource(
            name=f"task definition {d.name}",
            uri=f"runyard://definitions/{d.name}",
            mime_type="application/json",
            description=(d.description or "").strip().splitlines()[0] if d.description else None,
        )
        for d in services.registry.definitions()
    ]


@dataclass(frozen=True)
class ResourceRef:
    kind: str
    name: str
    rest: str
    query: dict[str, list[str]]


def parse_uri(uri: str) -> ResourceRef:
    """Split a runyard resource URI; :class:`MCPError` (invalid params) when it is not one."""
    if not uri.startswith(SCHEME):
        raise _invalid(f"Unknown resource {uri!r}: URIs start with {SCHEME}")
    body, _, query = uri[len(SCHEME) :].partition("?")
    kind, _, remainder = body.partition("/")
    if kind == "definitions" and remainder:
        return ResourceRef(kind, unquote(remainder), "", {})
    name, sep, rest = remainder.partition("/")
    if kind != "tasks" or not name or not sep or not rest:
        raise _invalid(f"Unknown resource {uri!r}; see resources/templates/list")
    return ResourceRef(kind, unquote(name), rest, parse_qs(query))


async def read_resource(
    services: Services, uri: str, scope: RunScope | None
) -> types.ReadResourceResult:
    ref = parse_uri(uri)
    content: types.TextResourceContents | types.BlobResourceContents
    try:
        if ref.kind == "definitions":
            content = _json(uri, services.registry.get(ref.name).definition.model_dump(mode="json"))
        else:
            content = await _task_resource(services, uri, ref, scope)
    except (RunyardError, ValueError, KeyError, LookupError, OSError) as exc:
        raise _invalid(scrub(services, error_answer(exc), scope)) from exc
    return types.ReadResourceResult(contents=[content])


async def _task_resource(
    services: Services, uri: str, ref: ResourceRef, scope: RunScope | None
) -> types.TextResourceContents | types.BlobResourceContents:
    task_id = await resolve_ref_async(services, ref.name, scope)  # a name, or type:task:name
    if ref.rest == "status":
        status = await run_in_threadpool(current_status, services, task_id, scope)
        return _json(uri, scrub(services, status.to_json(), scope))
    if ref.rest == "metadata":
        return _json(uri, scrub(services, await _metadata(services, task_id, scope), scope))
    if ref.rest == "log":
        status = await run_in_threadpool(current_status, services, task_id, scope)
        offset, limit = _int(ref, "offset", -1), _int(ref, "limit", DEFAULT_LIMIT)
        if offset < -1 or not MIN_LIMIT <= limit <= MAX_LIMIT:
            raise ValueError(f"offset must be >= -1 and limit {MIN_LIMIT}..{MAX_LIMIT}")
        log_path = log_to_read(services.workspace, status)  # never a path a record names
        chunk = await run_in_threadpool(read_log_window, log_path, offset, limit)
        return _json(uri, chunk.model_dump(mode="json"))
    if ref.rest.startswith("artifacts/"):
        path = unquote(ref.rest[len("artifacts/") :])
        return await run_in_threadpool(_artifact, services, uri, task_id, path, scope)
    raise _invalid(f"Unknown resource {uri!r}; see resources/templates/list")


async def _metadata(services: Services, task_id: str, scope: RunScope | None) -> Any:
    require_visible(services, task_id, scope)
    metadata = await run_in_threadpool(services.repository.get_metadata, task_id)
    if metadata is None:
        raise TaskNotFound(task_id)
    return metadata.to_json()


def _artifact(
    services: Services, uri: str, task_id: str, path: str, scope: RunScope | None
) -> types.TextResourceContents | types.BlobResourceContents:
    require_visible(services, task_id, scope)
    try:
        opened = open_under(services.workspace.task_dir(task_id), path, single_link=True)
    except NoSuchFile as exc:  # a running task may not have written it yet: say so
        raise missing_file(services, task_id, path, exc, scope) from exc
    with opened:
        if opened.size > MAX_ARTIFACT_BYTES:
            raise ValueError(
                f"{path} has {opened.size} bytes, over the {MAX_ARTIFACT_BYTES} bytes a resource "
                f"carries; download it from /api/v1/tasks/<task_id>/files/{path}"
            )
        data = _read_all(opened)
    mime = mimetypes.guess_type(path)[0] or "application/octet-stream"
    text = _as_text(data, mime)
    if text is not None:
        return types.TextResourceContents(uri=uri, mime_type=mime, text=text)
    blob = base64.b64encode(data).decode("ascii")
    return types.BlobResourceContents(uri=uri, mime_type=mime, blob=blob)


def _read_all(opened: OpenedFile) -> bytes:
    """The file's bytes from the descriptor that was checked (never reopened by name)."""
    chunks, offset = [], 0
    while offset < opened.size:
        chunk = os.pread(opened.fd, min(1 << 20, opened.size - offset), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _as_text(data: bytes, mime: str) -> str | None:
    textual = mime.startswith("text/") or mime.endswith(("json", "xml", "yaml", "javascript"))
    if not textual:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _int(ref: ResourceRef, name: str, default: int) -> int:
    values = ref.query.get(name)
    if not values:
        return default
    try:
        return int(values[0])
    except ValueError as exc:
        raise ValueError(f"{name} must be an integer, got {values[0]!r}") from exc


def _json(uri: str, value: Any) -> types.TextResourceContents:
    text = json.dumps(value, ensure_ascii=False)
    return types.TextResourceContents(uri=uri, mime_type="application/json", text=text)


def _invalid(message: str) -> MCPError:
    return MCPError(types.INVALID_PARAMS, message)
