"""Task references on the server: a name, ``type:name`` or ``type:task:name`` made a full id.

Every route and job that takes a task id takes a reference (:mod:`runyard.workspace.lookup`)
and resolves it here, once, before it acts: the Job API's ``task_id`` and ``task_ids``
arguments (over HTTP and MCP alike, :func:`resolved_args`), a submit's ``depends_on`` and
``source_tasks`` (:func:`resolved_submit_now`), the ``/api/v1/tasks/{task_id}/...`` routes
and the MCP task resources (:func:`resolve_ref`). A short reference is matched only
among the tasks the caller may see (a run token: its own session's), so neither an answer
nor an ambiguity's list of matches ever names another session's task.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from runyard.agents.models import RunScope
from runyard.api.scopes import can_see
from runyard.api.services import Services
from runyard.errors import InvalidTaskId, TaskNotFound, UnknownUpstream
from runyard.workspace.lookup import full_id_of, resolve_task_ref


def resolve_ref(services: Services, ref: object, scope: RunScope | None) -> str:
    """The full id ``ref`` names among the tasks ``scope`` may see. A full id (``#`` or
    ``:``) comes back canonical without a lookup; a short one is matched in the index."""

    def visible(task_id: str) -> bool:
        return can_see(services, task_id, scope)

    return resolve_task_ref(ref, services.repository.list_ids, None if scope is None else visible)


def _needs_lookup(args: BaseModel) -> bool:
    refs = [getattr(args, "task_id", None), *(getattr(args, "task_ids", None) or [])]
    return any(isinstance(ref, str) and full_id_of(ref) is None for ref in refs)


def resolved_args_now(services: Services, args: Any, scope: RunScope | None) -> Any:
    """``args`` with its ``task_id`` and ``task_ids`` made full ids. An entry of
    ``task_ids`` that names no task is left out and a malformed one kept (deleting either
    deletes nothing, as for a full id of no task); an ambiguous one fails the whole call."""
    if not isinstance(args, BaseModel):
        return args
    update: dict[str, Any] = {}
    task_id = getattr(args, "task_id", None)
    if isinstance(task_id, str):
        update["task_id"] = resolve_ref(services, task_id, scope)
    task_ids = getattr(args, "task_ids", None)
    if isinstance(task_ids, list):
        update["task_ids"] = _resolved_list(services, task_ids, scope)
    changed = {key: value for key, value in update.items() if value != getattr(args, key)}
    return args.model_copy(update=changed) if changed else args  # a full id: no copy


def _resolved_list(services: Services, refs: list[Any], scope: RunScope | None) -> list[Any]:
    resolved: list[Any] = []
    for ref in refs:
        try:
            task_id = full_id_of(ref) or resolve_ref(services, ref, scope)
        except TaskNotFound:
            continue
        except InvalidTaskId:
            task_id = ref  # as before names were taken: the delete passes it over
        if task_id not in resolved:
            resolved.append(task_id)
    return resolved


async def resolved_args(services: Services, args: Any, scope: RunScope | None) -> Any:
    """:func:`resolved_args_now`, in the thread pool when a short reference must be matched
    against the index (a full id is only rewritten, on the event loop)."""
    if isinstance(args, BaseModel) and _needs_lookup(args):
        return await run_in_threadpool(resolved_args_now, services, args, scope)
    return resolved_args_now(services, args, scope)


async def resolve_ref_async(services: Services, ref: object, scope: RunScope | None) -> str:
    """:func:`resolve_ref` for a route on the event loop: a short reference is matched in
    the thread pool (it walks the index), a full id is only rewritten."""
    task_id = full_id_of(ref)
    if task_id is not None:
        return task_id
    return await run_in_threadpool(resolve_ref, services, ref, scope)


def resolved_submit_now(services: Services, args: Any, scope: RunScope | None) -> Any:
    """A submit's ``depends_on`` and ``source_tasks`` with task names made full ids, among
    the tasks the caller may see. A ``depends_on`` name of no task is an
    :class:`UnknownUpstream` (a 422, nothing made); a malformed entry, or a ``source_tasks``
    name of no task, is left for the submit's own refusal."""
    depends_on = getattr(args, "depends_on", None)
    extra = dict(getattr(args, "model_extra", None) or {})
    source = extra.get("source_tasks")
    if not _short_refs(depends_on) and not _short_refs(source):
        return args
    data = args.model_dump()
    if _short_refs(depends_on):
        data["depends_on"] = _upstreams(services, depends_on, scope, must_exist=True)
    if _short_refs(source):  # lineage may name a task that is gone: ids stay as given
        data["source_tasks"] = ",".join(_upstreams(services, source, scope, must_exist=False))
    return type(args).model_validate(data)


def _entries(value: object) -> list[str]:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list):
        return [item.strip() for item in value if isinstance(item, str) and item.strip()]
    return []


def _short_refs(value: object) -> bool:
    return any(full_id_of(entry) is None for entry in _entries(value))


def _upstreams(
    services: Services, value: object, scope: RunScope | None, *, must_exist: bool
) -> list[str]:
    resolved = []
    for entry in _entries(value):
        try:
            resolved.append(full_id_of(entry) or resolve_ref(services, entry, scope))
        except TaskNotFound as exc:
            if must_exist:
                raise UnknownUpstream([entry]) from exc
            resolved.append(entry)  # not an id: refused by the submit's own rule
        except InvalidTaskId:
            resolved.append(entry)  # refused by the submit's own rule, in its words
    return resolved
