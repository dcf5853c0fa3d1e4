"""``runyard gc``: remove finished work as the ``retention`` settings say.

Through the workspace's server when one answers (``POST /api/v1/gc``, so its supervisor
deletes), else on the files directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from runyard.cli.common import (
    ConfigOpt,
    JsonOpt,
    LogDirOpt,
    TokenOpt,
    UrlOpt,
    WorkspaceOpt,
    console,
    fail,
    load_settings,
    print_json,
)

if TYPE_CHECKING:
    from runyard.config import Settings

DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="List what would be removed; remove nothing")
]
UpstreamsOpt = Annotated[
    bool,
    typer.Option("--include-upstreams", help="Also remove upstreams of tasks that are kept"),
]


def gc(
    dry_run: DryRunOpt = False,
    include_upstreams: UpstreamsOpt = False,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None,
    log_dir: LogDirOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Remove finished tasks, earlier runs and their logs past retention.keep_runs, old run
    workspaces, stray uploads, and stored files no kept run names."""
    settings = load_settings(workspace_dir, log_dir, config)
    report = _remote(settings, url, token, dry_run, include_upstreams)
    if report is None:
        report = _local(settings, dry_run, include_upstreams)
    if as_json:
        print_json(report)
    else:
        _print(report)


def _remote(
    settings: Settings, url: str | None, token: str | None, dry_run: bool, upstreams: bool
) -> dict[str, Any] | None:
    from runyard.cli.backend import connect
    from runyard.errors import HTTPError, ServerUnreachable

    client = connect(settings, url, token)  # no bound: a large collection takes its time
    if client is None:
        return None
    with client:
        try:
            return client.collect_garbage(dry_run=dry_run, include_upstreams=upstreams)
        except ServerUnreachable as exc:
            if url is not None:
                fail(f"server {client.url} does not answer: {exc.reason}")
            return None  # a recorded server that is gone: act on the files
        except HTTPError as exc:
            fail(f"gc refused by {client.url}: HTTP {exc.status_code} {exc.detail}")


def _local(settings: Settings, dry_run: bool, upstreams: bool) -> dict[str, Any]:
    from runyard.cli.backend import LocalBackend
    from runyard.retention import collect
    from runyard.retention.local import local_context

    backend = LocalBackend(settings)
    context = local_context(settings, backend)
    try:
        return collect(context, dry_run=dry_run, include_upstreams=upstreams).to_json()
    finally:
        if context.agent_store is not None:
            context.agent_store.close()


def _print(report: dict[str, Any]) -> None:
    """One row per item, its id or path whole (cli/tables.py), then the totals."""
    from runyard.cli.tables import Column, grid, print_table

    verb = "would remove" if report["dry_run"] else "removed"
    rows = [
        [f"{verb} {label}", name, ""]
        for key, label in (
            ("tasks", "task"), ("logs", "log"), ("run_workspaces", "run workspace"),
            ("uploads", "upload"), ("history", "earlier run"), ("blobs", "stored file"),
        )
        for name in report.get(key, ())
    ]  # fmt: skip
    rows += [
        ["kept", task_id, "upstream of a task that stays"] for task_id in report["kept_upstreams"]
    ]
    if rows:
        columns = [Column("", whole=True), Column("", is_id=True), Column("")]
        print_table(grid(columns, rows, show_header=False))
    console.print(f"{verb} {_count(report)} items, {report['bytes']} bytes", highlight=False)


def _count(report: dict[str, Any]) -> int:
    keys = ("tasks", "logs", "run_workspaces", "uploads", "history")
    return sum(len(report.get(key, ())) for key in keys)
