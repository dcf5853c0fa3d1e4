"""Task commands: run, submit, wait, status, ls, logs, graph, context, cancel, rm, defs."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from runyard.cli.common import (
    ConfigOpt,
    JsonOpt,
    LogDirOpt,
    WorkspaceOpt,
    console,
    err_console,
    fail,
    load_settings,
    parse_fields,
    print_json,
)
from runyard.cli.connect import with_backend, with_client
from runyard.cli.ended import ended_badly
from runyard.cli.errors import EXIT_FAILED, EXIT_INTERRUPTED, plain
from runyard.cli.interrupt import bounded_wait, cancel_foreground
from runyard.cli.logtail import last_lines
from runyard.cli.paging import DEFAULT_LIMIT
from runyard.cli.render import (
    graph_tree,
    status_summary,
    status_table,
    status_text,
)
from runyard.cli.tables import WideOpt, print_table
from runyard.errors import RunyardError

# what a command talks to is imported when it runs: the CLI starts without the client,
# the runtime or the record models (tests/cli/test_start_imports.py holds this)
if TYPE_CHECKING:
    from runyard.cli.backend import Backend
    from runyard.client import Client
    from runyard.config import Settings
    from runyard.wire import TaskHandle
    from runyard.workspace.records import TaskStatus

# how long `run` waits, once its task has ended, for the worker's cgroup to be emptied and
# removed (it takes milliseconds; a worker that outlives its final status is killed there)
REAP_WAIT_SECONDS = 10.0
Fields = Annotated[list[str] | None, typer.Argument(help="Task inputs as key=value (JSON values)")]
NameOpt = Annotated[str | None, typer.Option("--name", help="Fixed task name (1-32 [A-Za-z0-9-])")]
SourceOpt = Annotated[
    str | None, typer.Option("--source", help="Upstream task ids, comma-separated")
]
TaskIdArg = Annotated[
    str, typer.Argument(help="Task id ('base:demo:api-demo' or with '#'), or its unique name")
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout", min=0, help="Give up after SECONDS: exit 124, the task keeps running"
    ),
]


def _inputs(fields: list[str] | None, name: str | None, source: str | None) -> dict[str, Any]:
    inputs = parse_fields(fields or [])
    if name is not None:
        inputs["task_name"] = name
    if source is not None:
        inputs["source_tasks"] = source
    return inputs


def _sources_here(settings: Settings, source: str | None) -> str | None:
    """``--source`` with task names made full ids (cli/taskref.py); exit 1 or 2 if not."""
    from runyard.cli.taskref import resolved_sources

    try:
        return resolved_sources(settings, source)
    except RunyardError as exc:
        fail(*plain(exc))


def _settings(ws: Path | None, logs: Path | None, config: Path | None) -> Settings:
    return load_settings(ws, logs, config)


def _finish(status: TaskStatus, as_json: bool) -> None:
    if as_json:
        print_json(status.to_json())
    else:
        console.print(status_summary(status))
    if status.state != "succeeded":
        ended_badly(status)  # exit 1, the task's own code in the message


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
    """Run a task here, in its own worker process, with no server needed.

    With --detach beside the workspace's running server, the server queues it (under its
    max_concurrent_tasks), as `runyard submit` would. Ctrl-C cancels the task (this
    command is its only watcher) and exits 130.
    """
    from runyard.runtime.launch import run_task, wait_reaped
    from runyard.runtime.liveness import wait_for_run
    from runyard.tasks.registry import TaskRegistry
    from runyard.workspace.layout import Workspace

    settings = _settings(workspace_dir, log_dir, config)
    source = _sources_here(settings, source)
    if detach and _submitted_to_server(settings, task, _inputs(fields, name, source), as_json):
        return
    workspace = Workspace.open(settings.workspace_dir, settings.log_dir)
    try:
        handle = run_task(
            settings, workspace, TaskRegistry.load(), task, _inputs(fields, name, source),
            detach=detach,
        )  # fmt: skip
        if detach:
            print_json(handle.model_dump()) if as_json else console.print(handle.task_id)
            return
        try:
            status = wait_for_run(workspace, handle.task_id, handle.run_id, poll_interval=0.05)
        except KeyboardInterrupt:
            ended = cancel_foreground(settings, workspace, handle.task_id, handle.run_id)
            wait_reaped(REAP_WAIT_SECONDS)
            _interrupted(ended)
    except RunyardError as exc:
        fail(*plain(exc))
    wait_reaped(REAP_WAIT_SECONDS)  # the worker's cgroup goes with it, not after this exits
    _finish(status, as_json)


def _submitted_to_server(
    settings: Settings, task: str, inputs: dict[str, Any], as_json: bool
) -> bool:
    """Submit a detached run to the workspace's server when one runs (recorded in
    ``server.json`` and answering): launched here, it would run beside the server's queue
    and above its task cap. False when no server runs: the run is launched here."""
    from runyard.cli.backend import RemoteBackend, open_backend

    backend = open_backend(settings, None, None)
    if not isinstance(backend, RemoteBackend):
        return False
    try:
        handle = backend.client.submit(task, **inputs)
    except RunyardError as exc:
        fail(*plain(exc))
    print_json(handle.model_dump()) if as_json else console.print(handle.task_id)
    return True


def cached_note(handle: TaskHandle) -> str:
    """What ``submit`` tells (on stderr) when a cached result answered it."""
    return (
        f"cached: served by {handle.task_id} (run {handle.run_id}), which already succeeded "
        "with the same inputs; nothing ran"
    )


def _interrupted(status: TaskStatus) -> None:
    """After Ctrl-C on ``run``: say how the cancel ended, exit 130."""
    if status.state == "cancelled":
        message = f"cancelled {status.task_id}"
    elif status.terminal:
        message = f"{status.task_id} had already ended: {status.state}"
    else:
        message = f"{status.task_id} is still {status.state}; the cancel did not take effect yet"
    fail(message, EXIT_INTERRUPTED)


@with_client
def submit(
    client: Client,
    task: Annotated[str, typer.Argument(help="Registered task name, e.g. demo")],
    fields: Fields = None,
    name: NameOpt = None,
    source: SourceOpt = None,
    after: Annotated[
        str | None,
        typer.Option(
            "--after",
            help="Upstream task ids, comma-separated: wait until every one succeeded "
            "(fail without running if one fails); also recorded as lineage",
        ),
    ] = None,
    retries: Annotated[
        int | None,
        typer.Option(
            "--retries", min=0, max=20,
            help="Run a failed run again, as a new run, up to N times (default: the task's)",
        ),
    ] = None,
    retry_delay: Annotated[
        float | None,
        typer.Option(
            "--retry-delay", min=0, max=3600, metavar="SECONDS",
            help="Wait before the first retry, doubled at each further one (default 10)",
        ),
    ] = None,
    cache: Annotated[
        bool | None,
        typer.Option(
            "--cache/--no-cache",
            help="--cache: answer with an earlier succeeded run of the same task, inputs, "
            "upstream artifacts and plugin version, running nothing; --no-cache: run anyway "
            "(default: the task's setting)",
        ),
    ] = None,
    cache_expiry: Annotated[
        float | None,
        typer.Option(
            "--cache-expiry", min=0, metavar="SECONDS",
            help="With the cache: only a run that finished at most SECONDS ago serves",
        ),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the run to end")] = False,
    timeout: TimeoutOpt = None,
    as_json: JsonOpt = False,
    gpus: Annotated[
        int | None,
        typer.Option(
            "--gpus", min=0, max=64,
            help="GPUs the run needs (resources.gpus); it waits queued until they are free",
        ),
    ] = None,
    executor: Annotated[
        str | None,
        typer.Option(
            "--executor",
            help="Where the worker runs: local or kubernetes (default: the server's setting)",
        ),
    ] = None,
) -> None:
    """Submit a task to the server.

    With --wait, Ctrl-C (exit 130) or --timeout (exit 124) stops waiting, not the task.
    """
    if executor not in (None, "local", "kubernetes"):
        fail(f"--executor must be local or kubernetes, not {executor!r}")
    inputs = _inputs(fields, name, source)
    if executor is not None:
        inputs["executor"] = executor
    if after is not None:
        inputs["depends_on"] = after
    if retries is not None:
        inputs["retries"] = retries
    if retry_delay is not None:
        inputs["retry_delay_seconds"] = retry_delay
    if cache is not None:
        inputs["cache"] = cache
    if cache_expiry is not None:
        inputs["cache_expiry_seconds"] = cache_expiry
    if gpus is not None:
        inputs["resources"] = {"gpus": gpus}
    try:
        handle = client.submit(task, **inputs)
    except KeyboardInterrupt:
        fail(
            "interrupted while submitting; the task may be queued (see `runyard ls`)",
            EXIT_INTERRUPTED,
        )
    if handle.cached and not as_json:
        err_console.print(cached_note(handle), highlight=False, soft_wrap=True)
    if not wait:
        print_json(handle.model_dump()) if as_json else console.print(handle.task_id)
        return
    _wait_and_finish(client, handle.task_id, handle.run_id, timeout, as_json)


def _wait_and_finish(
    client: Client, task_id: str, run_id: str | None, timeout: float | None, as_json: bool
) -> None:
    def wait_task() -> TaskStatus:
        run = run_id or client.status(task_id).run_id
        return client.wait_task(task_id, run, poll_interval=0.5)

    _finish(bounded_wait(task_id, wait_task, timeout), as_json)


@with_client
def wait(
    client: Client,
    task_id: TaskIdArg,
    run_id: Annotated[str | None, typer.Argument(help="Run id (default: the current run)")] = None,
    timeout: TimeoutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Wait until a run ends and print its final status.

    Ctrl-C (exit 130) or --timeout (exit 124) stops waiting, not the task.
    """
    _wait_and_finish(client, task_id, run_id, timeout, as_json)


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
    limit: Annotated[
        int, typer.Option(min=1, help="At most this many, newest first")
    ] = DEFAULT_LIMIT,
    cursor: Annotated[
        str | None, typer.Option(help="Start after this task id (the footer gives it)")
    ] = None,
    show_all: Annotated[bool, typer.Option("--all", help="Every task, no limit")] = False,
    wide: WideOpt = False,
    text: Annotated[
        str | None, typer.Option(help="Only tasks whose id, name, error or config has this")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List tasks, newest first, 50 at a time unless --limit or --all says otherwise."""
    page = backend.page(None if show_all else limit, cursor, state, task_type, text)
    footer = page.footer()
    if as_json:
        print_json([item.to_json() for item in page.items])
        if footer:  # stdout stays JSON
            err_console.print(footer, highlight=False, soft_wrap=True)
        return
    if not sys.stdout.isatty():  # a pipe or a file: plain columns, never cut at a width
        sys.stdout.write(status_text(page.items) + "\n" + (f"{footer}\n" if footer else ""))
        return
    print_table(status_table(page.items), wide=wide)  # task ids whole at any width
    if footer:
        console.print(footer, style="dim", highlight=False, soft_wrap=True)


@with_backend
def logs(
    backend: Backend,
    task_id: TaskIdArg,
    offset: Annotated[int, typer.Option(help="Start byte offset; -1 reads the tail")] = -1,
    limit: Annotated[int, typer.Option(help="Max bytes (1024-262144)")] = 65536,
    lines: Annotated[
        int | None, typer.Option("--lines", "-n", min=0, help="Only the last LINES lines")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new output until the task ends")
    ] = False,
    run: Annotated[
        str | None,
        typer.Option("--run", help="The log of this run (an earlier one too; see runyard runs)"),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a bounded window of a task's log (byte offsets), or its last -n lines."""
    if not 1024 <= limit <= 262144 or offset < -1:
        fail("--limit must be 1024-262144 and --offset -1 or more")
    if lines is not None and as_json:
        fail("--lines prints text; use --offset/--limit with --json")
    if lines is not None:
        text, next_offset = last_lines(lambda at, size: backend.log(task_id, at, size, run), lines)
        sys.stdout.write(text)
    else:
        chunk = backend.log(task_id, offset, limit, run)
        if as_json and not follow:
            print_json(chunk.model_dump())
            return
        sys.stdout.write(chunk.content)
        next_offset = chunk.next_offset
    try:
        _follow(backend, task_id, next_offset, limit) if follow and run is None else None
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None
    sys.stdout.flush()


def _follow(backend: Backend, task_id: str, offset: int, limit: int) -> None:
    chunk = _follow_step(backend, task_id, offset, limit)
    while chunk is not None:
        chunk = _follow_step(backend, task_id, chunk.next_offset, limit)


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
    """Cancel a queued or running task.

    Exit 0 when it is cancelled, and also when it had already finished (it says so: there
    was nothing left to stop); exit 1 when there is no such task or it could not be stopped.
    """
    done = backend.cancel(task_id)
    if as_json:
        print_json(done)
    if done:
        None if as_json else console.print(f"cancelled {task_id}")
        return
    current = backend.status(task_id)  # no such task: exit 1 with its message
    if not current.terminal:
        fail(f"{task_id} is {current.state} and could not be cancelled; try again", EXIT_FAILED)
    message = f"{task_id} already finished ({current.state}); nothing to cancel"
    err_console.print(message, highlight=False) if as_json else console.print(message)


@with_backend
def rm(
    backend: Backend,
    task_ids: Annotated[list[str], typer.Argument(help="Task ids, or their unique names")],
    as_json: JsonOpt = False,
) -> None:
    """Delete finished (or metadata-only) tasks and their files.

    Exit 1 when any of them is not deleted: it does not exist, or it is queued or running
    (cancel it first); each such task is named with the reason.
    """
    if len(set(task_ids)) != len(task_ids):
        fail("task ids must be unique")
    deleted = backend.delete(task_ids)
    if as_json:
        print_json(deleted)
    else:
        for task_id in deleted:
            console.print(f"deleted {task_id}")
    refused = [_kept_reason(backend, task_id) for task_id in task_ids if task_id not in deleted]
    for reason in refused:
        err_console.print(f"[red]error:[/red] {reason}", highlight=False, soft_wrap=True)
    if refused:
        raise typer.Exit(EXIT_FAILED)


def _kept_reason(backend: Backend, task_id: str) -> str:
    """Why ``rm`` left ``task_id`` alone, in one sentence."""
    try:
        current = backend.status(task_id)
    except (RunyardError, KeyError) as exc:
        return plain(exc)[0]
    if not current.terminal:
        return f"{task_id} is {current.state}; cancel it first (runyard cancel {task_id})"
    return f"{task_id} could not be deleted (it changed meanwhile); try again"


@with_backend
def defs(
    backend: Backend,
    task: Annotated[str | None, typer.Argument(help="Show one definition in full")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List the installed task definitions and the plugins that did not load; with a name,
    that one's input and output fields."""
    from runyard.cli.defs_view import show_definitions

    show_definitions(backend, task, as_json)
