"""MCP tools: the Task Job API's jobs, one tool each, with the same arguments and handlers.

The seed's jobs (less ``list_task_ids`` and ``stream_task``, with a bounded ``wait_task``)
come first, then every other job of the catalogue (:mod:`runyard.api.catalogue`): a run
token's tool list leaves the admin-only jobs out, and calling one by name is refused.

A tool call runs the very handler ``POST /jobs/{name}`` runs (:mod:`runyard.api.jobs`),
with the caller's run scope, so a run token can do over MCP exactly what it can over the
Job API: its own session's tasks only, no host paths, no forwarding. The tool result's
structured content is the JobResponse ``{answer, success, metadata}``; ``isError`` is set
when ``success`` is false.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import mcp.types as types
from pydantic import ValidationError

from runyard.agents.models import RunScope
from runyard.api.catalogue import callable_jobs, job_schemas, refuse_admin_only
from runyard.api.envelope import error_answer, job_response
from runyard.api.jobs import JOBS, Job
from runyard.api.mcp.waiting import WAIT_JOB
from runyard.api.scopes import scrub
from runyard.api.services import Services
from runyard.api.taskrefs import resolved_args
from runyard.changes import ChangeHub

log = logging.getLogger("runyard.api.mcp")

TOOL_NAMES = (
    "submit",
    "wait_task",
    "status",
    "list_task_statuses",
    "read_task_log",
    "get_task_graph",
    "get_task_context",
    "cancel",
    "delete_tasks",
    "list_installed_task_definitions",
    "get_task_definition",
)


# the Job API's jobs, but an agent's wait is bounded (api/mcp/waiting.py)
TOOL_JOBS: dict[str, Job] = {**{name: JOBS[name] for name in TOOL_NAMES}, "wait_task": WAIT_JOB}


def tool_jobs(scope: RunScope | None) -> dict[str, Job]:
    """The tools the caller may call: the seed's above, then every other job of the
    catalogue (the AxonX jobs); a run token's leave out the admin-only ones."""
    others = {
        name: job
        for name, job in callable_jobs(scope).items()
        if name not in JOBS and name not in TOOL_JOBS
    }
    return {**TOOL_JOBS, **others}


def tool_list(services: Services, scope: RunScope | None = None) -> list[types.Tool]:
    """One tool per job the caller may call, its input schema the job's argument schema."""
    return [_tool(job, services) for job in tool_jobs(scope).values()]


def _tool(job: Job, services: Services) -> types.Tool:
    description = job.description
    if job.name == "submit":
        description = f"{description}\n\n{_installed_tasks(services)}"
    return types.Tool(name=job.name, description=description, input_schema=job_schemas(job)[0])


def _installed_tasks(services: Services) -> str:
    """What ``submit`` can start: each task with its description and its input fields."""
    lines = [
        "Pass the task's inputs next to `task`. Installed tasks (full input JSON Schemas: "
        "the resource runyard://definitions/{task} or the tool get_task_definition):"
    ]
    for definition in services.registry.definitions():
        fields = ", ".join(sorted(definition.input_schema.get("properties", {})))
        summary = (definition.description or "").strip().splitlines()
        about = f": {summary[0]}" if summary else ""
        lines.append(f"- {definition.name}{about} (inputs: {fields or 'none'})")
    return "\n".join(lines)


async def call_tool(
    services: Services,
    hub: ChangeHub,
    name: str,
    arguments: dict[str, Any] | None,
    scope: RunScope | None,
) -> types.CallToolResult:
    """Validate ``arguments`` with the job's model, run its handler, answer a JobResponse."""
    job = tool_jobs(None).get(name)
    if job is None:
        return _result(job_response(f"KeyError: unknown tool {name!r}", False))
    raw = arguments or {}
    if "target" in raw:
        message = "ValueError: 'target' (forwarding to another server) is not offered over MCP"
        return _result(job_response(message, False))
    try:
        args = job.args.model_validate(raw)
    except ValidationError as exc:
        return _result(job_response(f"ValidationError: {_errors(exc)}", False))
    return _result(await run_job(job, services, hub, args, scope))


async def run_job(
    job: Job, services: Services, hub: ChangeHub, args: Any, scope: RunScope | None
) -> dict[str, Any]:
    """The JobResponse of one handler call, errors as ``success: false`` answers."""
    try:
        refuse_admin_only(job.name, scope)
        args = await resolved_args(services, args, scope)  # names to full ids
        answer, success, *rest = await job.run(services, args, hub, scope)
    except Exception as exc:
        if not isinstance(exc, (ValueError, KeyError, LookupError, OSError)):
            log.exception("tool %s failed", job.name)
        return job_response(scrub(services, error_answer(exc), scope), False)
    return job_response(scrub(services, answer, scope), success, rest[0] if rest else None)


def _errors(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in error['loc']) or 'arguments'}: {error['msg']}"
        for error in exc.errors()
    )


def _result(response: dict[str, Any]) -> types.CallToolResult:
    text = json.dumps(response, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=response,
        is_error=not response["success"],
    )
