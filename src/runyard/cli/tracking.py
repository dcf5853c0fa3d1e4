"""``runyard metrics ID`` and ``runyard compare ID ID ...``: tracked metrics and params.

Through the workspace's server when one answers (``GET /api/v1/tasks/{id}/metrics``,
``GET /api/v1/compare``), else from the files, with the same answer either way.
``metrics`` prints a table per run (metric, steps, last, min, max) with a sparkline of each
metric; ``compare`` the params side by side, those that differ first and marked, then a
summary of each metric per run. ``--json`` prints the API's answer unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from runyard.cli.common import (
    ConfigOpt,
    JsonOpt,
    LogDirOpt,
    TokenOpt,
    UrlOpt,
    WorkspaceOpt,
    fail,
    load_settings,
    print_json,
)

if TYPE_CHECKING:
    from runyard.client import Client
    from runyard.config import Settings

REQUEST_TIMEOUT = 60.0
TABLE_POINTS = 400  # the table's series are thinned to this: first, last and extremes stay

TaskIdArg = Annotated[
    str, typer.Argument(help="Task id ('base:demo:api-demo' or with '#'), or its unique name")
]
RunOpt = Annotated[str | None, typer.Option("--run", help="Only this run (a run id)")]
NameOpt = Annotated[str | None, typer.Option("--name", help="Only this metric")]
MaxPointsOpt = Annotated[
    int | None,
    typer.Option("--max-points", min=2, max=10_000, help="Thin each series to this many points"),
]
RefsArg = Annotated[
    list[str],
    typer.Argument(
        metavar="ID", help="2-20 tasks (ids or names), '<task>@<run id>' for an earlier run"
    ),
]


def metrics(
    task_id: TaskIdArg,
    run: RunOpt = None,
    name: NameOpt = None,
    max_points: MaxPointsOpt = None,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None,
    log_dir: LogDirOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Show a task's metrics: per run, each metric's steps, last, min and max, and a
    sparkline."""
    settings = load_settings(workspace_dir, log_dir, config)
    points = max_points if as_json or max_points else TABLE_POINTS
    query = {"run_id": run, "name": name, "max_points": points}
    answer = _answer(
        settings, url, token, lambda c: c.metrics(task_id, **query).model_dump(mode="json")
    )
    if answer is None:
        answer = _local_metrics(settings, task_id, query)
    if as_json:
        print_json(answer)
        return
    from runyard.cli.trackview import metrics_tables

    metrics_tables(answer)


def compare(
    refs: RefsArg,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None,
    log_dir: LogDirOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Compare 2-20 runs: params side by side (those that differ first, marked), then each
    metric's summary per run."""
    settings = load_settings(workspace_dir, log_dir, config)
    answer = _answer(settings, url, token, lambda c: c.compare(refs).model_dump(mode="json"))
    if answer is None:
        answer = _local_compare(settings, refs)
    if as_json:
        print_json(answer)
        return
    from runyard.cli.trackview import compare_tables

    compare_tables(answer)


def _answer(settings: Settings, url: str | None, token: str | None, ask: Any) -> Any:
    """The server's answer to ``ask(client)``; None when no server answers (the files do)."""
    from runyard.cli.backend import connect
    from runyard.errors import HTTPError, NotFound, ServerUnreachable

    client: Client | None = connect(settings, url, token, timeout=REQUEST_TIMEOUT)
    if client is None:
        return None
    with client:
        try:
            return ask(client)
        except ServerUnreachable as exc:
            if url is not None:
                fail(f"cannot reach the server at {client.url}: {exc.reason}")
            return None  # a recorded server that is gone: read the files
        except NotFound as exc:
            fail(str(exc.detail), 1)
        except HTTPError as exc:
            fail(f"{client.url} refused: {exc.detail}")


def _local_metrics(settings: Settings, ref: str, query: dict[str, Any]) -> dict[str, Any]:
    from runyard.tracking.views import metrics_answer, task_runs

    with _refusals():
        workspace, task_id, current = _local_task(settings, ref)
        runs = task_runs(workspace, task_id, current, query["run_id"])
        return metrics_answer(task_id, runs, name=query["name"], max_points=query["max_points"])


def _local_compare(settings: Settings, refs: list[str]) -> dict[str, Any]:
    from runyard.tracking.views import check_compare_count, compare_answer, split_ref, task_runs

    with _refusals():
        check_compare_count(refs)
        runs = []
        for ref in refs:
            task_ref, run_id = split_ref(ref)
            workspace, task_id, current = _local_task(settings, task_ref)
            runs += task_runs(workspace, task_id, current, run_id or current.run_id)[:1]
        return compare_answer(runs)


def _local_task(settings: Settings, ref: str) -> tuple[Any, str, Any]:
    """The workspace, the full id ``ref`` names there and its current status."""
    from runyard.cli.backend import LocalBackend
    from runyard.cli.taskref import resolve
    from runyard.workspace.layout import Workspace

    task_id = resolve(LocalBackend(settings), ref)
    workspace = Workspace.open(settings.workspace_dir, settings.log_dir)
    current = workspace.read_status(task_id)
    if current is None:
        fail(f"no task {task_id}", 1)
    return workspace, task_id, current


@contextmanager
def _refusals() -> Iterator[None]:
    """A refusal of the files printed as the server's would be."""
    from runyard.cli.errors import plain
    from runyard.errors import RunNotFound, RunyardError

    try:
        yield
    except RunNotFound as exc:  # a KeyError: plain() would print its bare task id
        fail(str(exc), 1)
    except RunyardError as exc:
        fail(*plain(exc))
