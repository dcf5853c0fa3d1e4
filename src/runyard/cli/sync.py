"""``runyard sync push``: copy finished tasks (records, artifacts, run log) to another server.

The source is this workspace's files (a finished task folder no longer changes, so it is
read directly whether or not a server runs on it); ``--target NAME`` (a ``targets``
entry) or ``--url``/``--token`` name the receiver, which needs its admin token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from runyard.cli.common import (
    ConfigOpt,
    JsonOpt,
    LogDirOpt,
    WorkspaceOpt,
    console,
    fail,
    load_settings,
    print_json,
)

if TYPE_CHECKING:
    from runyard.config import Settings
    from runyard.sync.sender import Receiver

app = typer.Typer(
    help="Sync finished tasks between runyard servers.", no_args_is_help=True, rich_markup_mode=None
)


def _receiver(
    settings: Settings, target: str | None, url: str | None, token: str | None
) -> Receiver:
    from runyard.sync.sender import Receiver

    if target and url:
        fail("give --target or --url, not both")
    if target:
        entry = settings.targets.get(target)
        if entry is None:
            fail(f"unknown target {target!r}; configured: {', '.join(settings.targets) or 'none'}")
        return Receiver(entry.url, token or entry.token)
    if url:
        return Receiver(url, token)
    fail("name the receiver: --target NAME (a configured target) or --url URL --token T")


def _full_ids(settings: Settings, refs: list[str]) -> tuple[str, ...]:
    """The tasks a push names, names made full ids by the workspace's index."""
    from runyard.cli.backend import LocalBackend
    from runyard.cli.errors import plain
    from runyard.cli.taskref import resolve
    from runyard.errors import RunyardError

    backend = LocalBackend(settings)
    try:
        return tuple(resolve(backend, ref) for ref in refs)
    except RunyardError as exc:
        fail(*plain(exc))


@app.command()
def push(
    task_ids: Annotated[
        list[str] | None, typer.Argument(help="Only these tasks (ids, or their unique names)")
    ] = None,
    target: Annotated[str | None, typer.Option("--target", help="A configured target")] = None,
    url: Annotated[str | None, typer.Option("--url", help="Receiver URL")] = None,
    token: Annotated[str | None, typer.Option("--token", help="Receiver admin token")] = None,
    task_type: Annotated[str | None, typer.Option("--task-type", help="Only this type")] = None,
    task: Annotated[str | None, typer.Option("--task", help="Only this registered task")] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only tasks finished at/after (ISO UTC)")
    ] = None,
    delete: Annotated[
        bool,
        typer.Option(
            "--delete",
            help="Also delete on the receiver what this workspace sent and no longer has",
        ),
    ] = False,
    as_json: JsonOpt = False,
    workspace_dir: WorkspaceOpt = None,
    log_dir: LogDirOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Push finished tasks; a second push of the same tasks sends nothing."""
    from runyard.sync.candidates import TaskFilter
    from runyard.sync.errors import SyncError
    from runyard.sync.sender import push as push_tasks
    from runyard.workspace.layout import Workspace

    settings = load_settings(workspace_dir, log_dir, config)
    receiver = _receiver(settings, target, url, token)
    workspace = Workspace.open(settings.workspace_dir, settings.log_dir)
    task_filter = TaskFilter(_full_ids(settings, task_ids or []), task_type, task, since)
    try:
        report = push_tasks(workspace, receiver, task_filter, delete=delete)
    except (SyncError, ValueError) as exc:
        fail(str(exc))
    if as_json:
        print_json(report.to_json())
        return
    console.print(
        f"sent {len(report.sent)}, skipped {len(report.skipped)} (same), "
        f"refused {len(report.refused)}, {report.bytes} bytes"
    )
    for task_id in report.deleted:
        console.print(f"  deleted {task_id}: gone here", highlight=False)
    for task_id, old_run in report.replaced.items():
        console.print(f"  replaced {task_id}: older run {old_run}", highlight=False)
    for task_id, reason in report.reasons.items():
        console.print(f"  refused {task_id}: {reason}", highlight=False)
