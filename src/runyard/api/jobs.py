"""The thirteen jobs of the Task Job API (seed 002): arguments, handlers and answer schemas.

Each handler takes the services, its validated arguments, the change hub and the run
scope of the caller (None for the admin), and returns ``(answer, success)``. Errors it
raises become ``success: false`` answers at the edge. A run token sees only its session's
tasks (:mod:`runyard.api.scopes`); its submits run sandboxed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, TypeAdapter
from starlette.concurrency import run_in_threadpool

from runyard.agents.models import RunScope
from runyard.api import job_args as a
from runyard.api.detail import with_detail
from runyard.api.idempotency import current_key
from runyard.api.scopes import (
    can_see,
    require_visible,
    scoped_context,
    scoped_graph,
    status_filter,
    submitter_for,
    visible_ids,
)
from runyard.api.services import Services
from runyard.api.taskrefs import resolved_submit_now
from runyard.changes import ChangeHub
from runyard.errors import RunMismatch, TaskNotFound
from runyard.repository.models import TaskContext, TaskGraph
from runyard.runtime.attempts import follows, retry_due
from runyard.runtime.liveness import settle
from runyard.runtime.submitters import (
    log_to_read,
    own_status,
    read_submitter,
    trusted_log_path,
)
from runyard.runtime.supervisor import TaskHandle
from runyard.runtime.taskcache import CacheRequest
from runyard.tasks.base import TaskDefinition
from runyard.workspace.history import kept_run_log
from runyard.workspace.identity import parse_task_id
from runyard.workspace.logs import TaskLogChunk, read_log_window
from runyard.workspace.records import TaskStatus

JobResult = tuple[Any, bool] | tuple[Any, bool, dict[str, Any]]
Scope = RunScope | None
Handler = Callable[[Services, Any, ChangeHub, RunScope | None], Awaitable[JobResult]]


@dataclass(frozen=True)
class Job:
    name: str
    description: str
    args: type[BaseModel]
    answer: Any
    run: Handler

    def answer_schema(self) -> dict[str, Any]:
        return TypeAdapter(self.answer).json_schema(by_alias=True)


def current_status(services: Services, task_id: str, scope: RunScope | None = None) -> TaskStatus:
    """The task's status, with a dead worker settled; TaskNotFound when there is none (or
    when ``scope`` may not see it). ``log_path`` is where the log really is."""
    require_visible(services, task_id, scope)
    return _current(services, task_id, services.repository.get(task_id))


def _current(services: Services, task_id: str, status: TaskStatus | None) -> TaskStatus:
    record = read_submitter(services.workspace, task_id)  # read once for both below
    status = own_status(services.workspace, task_id, status, record)  # never a forged one
    if status is None:
        raise TaskNotFound(task_id)
    if status.state == "running":
        status = settle(services.workspace, status)
    log_path = trusted_log_path(services.workspace, status, record)
    if log_path != status.log_path:
        status = status.model_copy(update={"log_path": log_path})
    return status


async def status_now(services: Services, task_id: str, scope: Scope) -> TaskStatus:
    """:func:`current_status`, answered on the event loop when that is two small local reads
    (the status file and the submitter record) with the index free: a hop to the thread
    pool and back costs more than both. A running task (settling takes the liveness locks
    and may write) and a busy index go to the thread pool."""
    require_visible(services, task_id, scope)
    free, status = services.repository.get_unless_busy(task_id)
    if not free:
        return await run_in_threadpool(current_status, services, task_id, scope)
    if status is not None and status.state == "running":
        return await run_in_threadpool(_current, services, task_id, status)
    return _current(services, task_id, status)


async def _list_definitions(
    s: Services, args: a.ListDefinitionsArgs, hub: ChangeHub, scope: Scope
) -> JobResult:
    """Broken plugins are named in ``metadata.plugin_errors``, plugins only a restart brings
    up to date in ``metadata.restart_required``; they never hide the others. Plugins
    installed since the last look are found first (at most once a second)."""
    await run_in_threadpool(s.registry.rescan)
    leave_out = set() if args.include_schemas else {"input_schema", "output_schema"}
    definitions = [d.model_dump(mode="json", exclude=leave_out) for d in s.registry.definitions()]
    report = s.registry.report()
    problems = {"plugin_errors", "restart_required"}
    metadata = report.model_dump(include=problems, exclude_defaults=True)
    return definitions, True, metadata


async def _get_definition(s: Services, args: a.TaskArgs, hub: ChangeHub, scope: Scope) -> JobResult:
    # an unknown name rescans the plugins, which imports them: off the event loop
    registered = await run_in_threadpool(s.registry.get, args.task)
    return registered.definition.model_dump(mode="json"), True


async def _submit(s: Services, args: a.SubmitArgs, hub: ChangeHub, scope: Scope) -> JobResult:
    return await run_in_threadpool(submit_now, s, args, scope)


def submit_now(s: Services, args: a.SubmitArgs, scope: Scope) -> JobResult:
    """The submit job itself, in the calling thread (it writes and syncs the task folder)."""
    s.read_only.refuse("submit a task")  # 507 on a full disk (api/readonly.py)
    args = resolved_submit_now(s, args, scope)  # upstream task names to full ids
    key = current_key.get()  # kept in the task folder: a retry after a crash finds the task
    handle = s.supervisor.submit(
        args.task, a.extra_inputs(args), submitter_for(scope), key, args.executor,
        args.depends_on, cache=CacheRequest(args.cache, args.cache_expiry_seconds),
        retries=args.retries, retry_delay_seconds=args.retry_delay_seconds,
        resources=args.resources,
    )  # fmt: skip
    return handle.model_dump(mode="json"), True


async def wait_until_finished(
    s: Services,
    hub: ChangeHub,
    task_id: str,
    run_id: str | None,
    poll_interval: float,
    scope: Scope = None,
) -> TaskStatus:
    """Wait for a run to end, woken by record changes; ``poll_interval`` bounds each wait.
    Each look is :func:`status_now`'s: a run that has ended is answered on the event loop.
    A run that is retried is followed to its last attempt (:mod:`runyard.runtime.retries`)."""
    with hub.subscribe(task_id) as sub:
        while True:
            status = await status_now(s, task_id, scope)
            if run_id is not None and not follows(status, run_id):
                raise RunMismatch(task_id, run_id, status.run_id)
            if status.terminal and not retry_due(status):
                return status
            await sub.wait(poll_interval)


async def _wait(s: Services, args: a.WaitArgs, hub: ChangeHub, scope: Scope) -> JobResult:
    status = await wait_until_finished(s, hub, args.task_id, args.run_id, args.poll_interval, scope)
    return with_detail(status.to_json(), args.detail), status.state == "succeeded"


async def _list_ids(s: Services, args: Any, hub: ChangeHub, scope: Scope) -> JobResult:
    return await run_in_threadpool(s.repository.list_ids, status_filter(s, scope)), True


async def _list_statuses(
    s: Services, args: a.ListStatusesArgs, hub: ChangeHub, scope: Scope
) -> JobResult:
    items, next_cursor = await run_in_threadpool(_settled_statuses, s, args, scope)
    metadata = {"next_cursor": next_cursor} if args.limit or args.cursor or args.text else {}
    return [with_detail(item.to_json(), args.detail) for item in items], True, metadata


def _settled_statuses(
    s: Services, args: a.ListStatusesArgs, scope: Scope
) -> tuple[list[TaskStatus], str | None]:
    """One page, running items settled: in the thread pool, as settling reads records, takes
    the liveness locks and may write the end of a dead run."""
    items, next_cursor = s.repository.list_statuses(
        limit=args.limit,
        cursor=args.cursor,
        state=args.state.value if args.state else None,
        task_type=args.task_type,
        text=args.text,
        visible=status_filter(s, scope),
    )
    return [settle(s.workspace, i) if i.state == "running" else i for i in items], next_cursor


async def _status(s: Services, args: a.StatusArgs, hub: ChangeHub, scope: Scope) -> JobResult:
    status = await status_now(s, args.task_id, scope)
    return with_detail(status.to_json(), args.detail), True


async def _read_log(s: Services, args: a.ReadLogArgs, hub: ChangeHub, scope: Scope) -> JobResult:
    status = await run_in_threadpool(current_status, s, args.task_id, scope)
    if args.run_id is not None and status.run_id != args.run_id:  # a kept run's log
        log_path = await run_in_threadpool(kept_run_log, s.workspace, status, args.run_id)
    else:
        log_path = log_to_read(s.workspace, status)
    chunk = await run_in_threadpool(read_log_window, log_path, args.offset, args.limit)
    return chunk.model_dump(mode="json"), True


async def _stream(s: Services, args: a.StreamArgs, hub: ChangeHub, scope: Scope) -> JobResult:
    status = await wait_until_finished(s, hub, args.task_id, None, args.poll_interval, scope)
    return status.to_json(), status.exit_code == 0


async def _graph(s: Services, args: a.StrictTaskIdArgs, hub: ChangeHub, scope: Scope) -> JobResult:
    await run_in_threadpool(require_visible, s, args.task_id, scope)  # reads the submitter
    graph = await run_in_threadpool(s.repository.graph, args.task_id)
    graph = await run_in_threadpool(scoped_graph, s, graph, scope)
    return graph.model_dump(mode="json", by_alias=True), True


async def _context(
    s: Services, args: a.StrictTaskIdMinArgs, hub: ChangeHub, scope: Scope
) -> JobResult:
    return await run_in_threadpool(_scoped_context, s, args.task_id, scope), True


def _scoped_context(s: Services, task_id: str, scope: Scope) -> Any:
    """Reads the submitter record and the task's files: in the thread pool."""
    require_visible(s, task_id, scope)
    context = s.repository.context(task_id)
    status = context.status
    if status is not None:  # where the log really is (see current_status)
        status = status.model_copy(update={"log_path": trusted_log_path(s.workspace, status)})
        context = context.model_copy(update={"status": status, "log_path": status.log_path or None})
    return scoped_context(s, context, scope)


async def _cancel(s: Services, args: a.CancelArgs, hub: ChangeHub, scope: Scope) -> JobResult:
    parse_task_id(args.task_id)
    if not await run_in_threadpool(can_see, s, args.task_id, scope):
        return False, True  # what cancelling a task that does not exist answers
    if args.run_id is not None and not await run_in_threadpool(_is_current, s, args):
        return False, True  # that run is no longer the task's: nothing of it to cancel
    return await run_in_threadpool(s.supervisor.cancel, args.task_id), True


def _is_current(s: Services, args: a.CancelArgs) -> bool:
    status = s.repository.get(args.task_id)
    return status is not None and status.run_id == args.run_id


async def _delete(s: Services, args: a.DeleteArgs, hub: ChangeHub, scope: Scope) -> JobResult:
    task_ids = await run_in_threadpool(visible_ids, s, list(args.task_ids), scope)
    return await run_in_threadpool(s.supervisor.delete, task_ids), True


JOBS: dict[str, Job] = {
    job.name: job
    for job in (
        Job(
            "list_installed_task_definitions",
            "Enumerate the built-in and plugin Tasks installed in this environment.",
            a.ListDefinitionsArgs,
            list[TaskDefinition],
            _list_definitions,
        ),
        Job(
            "get_task_definition",
            "Get one registered Task definition with its input and output JSON Schema.",
            a.TaskArgs,
            TaskDefinition,
            _get_definition,
        ),
        Job(
            "submit",
            "Start a Task in its own worker process; answers its TaskHandle.",
            a.SubmitArgs,
            TaskHandle,
            _submit,
        ),
        Job(
            "wait_task",
            "Wait until a specific run ends; answers its final TaskStatus.",
            a.WaitArgs,
            TaskStatus,
            _wait,
        ),
        Job(
            "list_task_ids",
            "List the ids of tasks that have a status record.",
            a.NoArguments,
            list[str],
            _list_ids,
        ),
        Job(
            "list_task_statuses",
            "List status snapshots, newest first (created_at, then task_id, descending).",
            a.ListStatusesArgs,
            list[TaskStatus],
            _list_statuses,
        ),
        Job("status", "Read a task's current TaskStatus.", a.StatusArgs, TaskStatus, _status),
        Job(
            "read_task_log",
            "Read a bounded byte window of a task's log.",
            a.ReadLogArgs,
            TaskLogChunk,
            _read_log,
        ),
        Job(
            "stream_task",
            "Follow progress and log until the task stops; use /jobs/stream_task/events for SSE.",
            a.StreamArgs,
            TaskStatus,
            _stream,
        ),
        Job(
            "get_task_graph",
            "Read the lineage graph (connected component) of a task.",
            a.StrictTaskIdArgs,
            TaskGraph,
            _graph,
        ),
        Job(
            "get_task_context",
            "Task paths, status and lineage relations, for agents.",
            a.StrictTaskIdMinArgs,
            TaskContext,
            _context,
        ),
        Job(
            "cancel",
            "Cancel an active worker managed by this service.",
            a.CancelArgs,
            bool,
            _cancel,
        ),
        Job(
            "delete_tasks",
            "Delete finished or metadata-only tasks and their files.",
            a.DeleteArgs,
            list[str],
            _delete,
        ),
    )
}
