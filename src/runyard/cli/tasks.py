"""Task commands: run, submit, wait, status, ls, logs, graph, context, cancel, rm, defs."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from runyard.cli.backend import Backend
from runyard.cli.common import (
    ConfigOpt,
    JsonOpt,
    LogDirOpt,
    WorkspaceOpt,
    console,
    fail,
    load_settings,
    parse_fields,
    print_json,
)
from runyard.cli.connect import with_backend, with_client
from runyard.cli.render import graph_tree, status_summary, status_table
from runyard.client import Client
from runyard.config import Settings
from runyard.errors import RunyardError
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.records import TaskStatus

Fields = Annotated[list[str] | None, typer.Argument(help="Task inputs as key=value (JSON values)")]
NameOpt = Annotated[str | None, typer.Option("--name", help="Fixed task name (1-32 [A-Za-z0-9-])")]
SourceOpt = Annotated[
    str | None, typer.Option("--source", help="Upstream task ids, comma-separated")
]
TaskIdArg = Annotated[str, typer.Argument(help="Full task id, e.g. 'base#demo#api-demo'")]


def _inputs(fields: list[str] | None, name: str | None, source: str | None) -> dict[str, Any]:
    inputs = parse_fields(fields or [])
    if name is not None:
        inputs["task_name"] = name
    if source is not None:
        inputs["source_tasks"] = source
    return inputs


def _settings(ws: Path | None, logs: Path | None, config: Path | None) -> Settings:
    return load_settings(ws, logs, config)


def _finish(status: TaskStatus, as_json: bool) -> None:
    if as_json:
        print_json(status.to_json())
    else:
        console.print(status_summary(status))
    if status.state != "succeeded":
        raise typer.Exit(status.exit_code or 1)


def run(
    task: Annotated[str, typer.Argument(help="Registered task name, e.g. demo")],
    fields: Fields = None,
    name: NameOpt = None,
    source: SourceOpt = None,
    detach: Annotated[bool, typer.Option("--detach", help="Return the handle at once")] = False,
    as_json: JsonOpt = False,
    workspace_dir: WorkspaceOpt = None,
    log_dir: LogDirOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Run a task here, in its own worker process, with no server needed."""
    from runyard.runtime.launch import run_task
    from runyard.runtime.liveness import wait_for_run
    from runyard.workspace.layout import Workspace

    settings = _settings(workspace_dir, log_dir, config)
    workspace = Workspace.open(settings.workspace_dir, settings.log_dir)
    try:
        handle = run_task(
            settings, workspace, TaskRegistry.load(), task, _inputs(fields, name, source),
            detach=detach,
        )  # fmt: skip
        if detach:
            print_json(handle.model_dump()) if as_json else console.print(handle.task_id)
            return
        status = wait_for_run(workspace, handle.task_id, handle.run_id, poll_interval=0.05)
    except RunyardError as exc:
        fail(str(exc))
    _finish(status, as_json)


@with_client
def submit(
    client: Client,
    task: Annotated[str, typer.Argument(help="Registered task name, e.g. demo")],
    fields: Fields = None,
    name: NameOpt = None,
    source: SourceOpt = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the run to end")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Submit a task to the server."""
    handle = client.submit(task, **_inputs(fields, name, source))
    if not wait:
        print_json(handle.model_dump()) if as_json else console.print(handle.task_id)
        return
    _finish(client.wait_task(handle.task_id, handle.run_id, poll_interval=0.5), as_json)


@with_client
def wait(
    client: Client,
    task_id: TaskIdArg,
    run_id: Annotated[str | None, typer.Argument(help="Run id (default: the current run)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Wait until a run ends and print its final status."""
    run = run_id or client.status(task_id).run_id
    _finish(client.wait_task(task_id, run, poll_interval=0.5), as_json)


@with_backend
def status(backend: Backend, task_id: TaskIdArg, as_json: JsonOpt = False) -> None:
    """Print a task's status."""
    current = backend.status(task_id)
    print_json(current.to_json()) if as_json else console.print(status_summary(current))


@with_backend
def ls(
    backend: Backend,
    state: Annotated[str | None, typer.Option(help="Only this state")] = None,
    task_type: Annotated[str | None, typer.Option("--type", help="Only this task type")] = None,
    limit: Annotated[int | None, typer.Option(help="At most this many, newest first")] = None,
    text: Annotated[
        str | None, typer.Option(help="Only tasks whose id, name, error or config has this")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List tasks, newest first."""
    items = backend.statuses(limit, state, task_type, text)
    if as_json:
        print_json([item.to_json() for item in items])
    else:
        console.print(status_table(items))


@with_backend
def logs(
    backend: Backend,
    task_id: TaskIdArg,
    offset: Annotated[int, typer.Option(help="Start byte offset; -1 reads the tail")] = -1,
    limit: Annotated[int, typer.Option(help="Max bytes (1024-262144)")] = 65536,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new output")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Print a bounded window of a task's log (byte offsets)."""
    if not 1024 <= limit <= 262144 or offset < -1:
        fail("--limit must be 1024-262144 and --offset -1 or more")
    chunk = backend.log(task_id, offset, limit)
    if as_json and not follow:
        print_json(chunk.model_dump())
        return
    sys.stdout.write(chunk.content)
    while follow:
        chunk = _follow_step(backend, task_id, chunk.next_offset, limit)
        if chunk is None:
            break
    sys.stdout.flush()


def _follow_step(backend: Backend, task_id: str, offset: int, limit: int) -> Any:
    chunk = backend.log(task_id, offset, limit)
    sys.stdout.write(chunk.content)
    sys.stdout.flush()
    if chunk.has_more_after or chunk.next_offset != offset:
        return chunk
    if backend.status(task_id).terminal:
        tail = backend.log(task_id, chunk.next_offset, limit)
        sys.stdout.write(tail.content)
        return None
    time.sleep(0.3)
    return chunk


@with_backend
def graph(backend: Backend, task_id: TaskIdArg, as_json: JsonOpt = False) -> None:
    """Show a task's lineage as a tree."""
    result = backend.graph(task_id)
    if as_json:
        print_json(result.model_dump(mode="json", by_alias=True))
    else:
        console.print(graph_tree(result))


@with_backend
def context(backend: Backend, task_id: TaskIdArg) -> None:
    """Print a task's context (paths, status, relations) as JSON."""
    print_json(backend.context(task_id).model_dump(mode="json", by_alias=True))


@with_backend
def cancel(backend: Backend, task_id: TaskIdArg, as_json: JsonOpt = False) -> None:
    """Cancel a queued or running task."""
    done = backend.cancel(task_id)
    if as_json:
        print_json(done)
    else:
        console.print("cancelled" if done else "nothing to cancel (not active)")


@with_backend
def rm(
    backend: Backend,
    task_ids: Annotated[list[str], typer.Argument(help="Full task ids")],
    as_json: JsonOpt = False,
) -> None:
    """Delete finished (or metadata-only) tasks and their files."""
    if len(set(task_ids)) != len(task_ids):
        fail("task ids must be unique")
    deleted = backend.delete(task_ids)
    if as_json:
        print_json(deleted)
        return
    for task_id in task_ids:
        console.print(f"{'deleted' if task_id in deleted else 'skipped'} {task_id}")


@with_backend
def defs(
    backend: Backend,
    task: Annotated[str | None, typer.Argument(help="Show one definition in full")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List the installed task definitions."""
    items = backend.definitions()
    if task is not None:
        items = [d for d in items if d.name == task]
        if not items:
            fail(f"Unknown Task: {task}")
    if as_json or task is not None:
        print_json([d.model_dump() for d in items] if task is None else items[0].model_dump())
        return
    for d in items:
        console.print(f"[bold]{d.name}[/] ({d.task_type}, {d.source}) {d.description}")
