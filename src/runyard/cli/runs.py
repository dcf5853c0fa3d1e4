"""``runyard runs TASK_ID``: the runs of a task, the current one and the earlier runs that
fixed-name reruns replaced (kept under ``<workspace>/.history``), newest first.

Through the workspace's server when one answers (``GET /api/v1/tasks/{id}/runs``), else
from the files. One line per run with its full run id, state and times (local, zone
named); ``--json`` prints the API's answer unchanged.
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
    fail,
    load_settings,
    print_json,
)

if TYPE_CHECKING:
    from runyard.config import Settings

REQUEST_TIMEOUT = 60.0
TaskIdArg = Annotated[
    str, typer.Argument(help="Task id ('base:demo:api-demo' or with '#'), or its unique name")
]


def runs(
    task_id: TaskIdArg,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None,
    log_dir: LogDirOpt = None,
    config: ConfigOpt = None,
) -> None:
    """List a task's runs, newest first: the current one and those reruns replaced."""
    settings = load_settings(workspace_dir, log_dir, config)
    answer = _remote(settings, url, token, task_id)
    if answer is None:
        answer = _local(settings, task_id)
    if as_json:
        print_json(answer)
        return
    for run in answer["runs"]:
        typer.echo(run_line(run))


def run_line(run: dict[str, Any]) -> str:
    """``<run id>  <state>  created …  started …  finished …  [attempt N]  [current]``,
    local times."""
    parts = [
        run["run_id"],
        f"{run['state']:<9}",
        f"created {_when(run['created_at'])}",
        f"started {_when(run['started_at'])}",
        f"finished {_when(run['finished_at'])}",
    ]
    if run.get("attempt") is not None:  # a task with retries: each attempt is a run
        parts.append(f"attempt {run['attempt']}")
    if run["current"]:
        parts.append("current")
    return "  ".join(parts)


def _when(text: str | None) -> str:
    """Local time with its zone, as ``status`` and the Studio show times; ``-`` when unset."""
    from runyard.cli.render import local_time

    return local_time(text) or "-"


def _remote(
    settings: Settings, url: str | None, token: str | None, task_id: str
) -> dict[str, Any] | None:
    from runyard.cli.backend import connect
    from runyard.errors import HTTPError, NotFound, ServerUnreachable

    client = connect(settings, url, token, timeout=REQUEST_TIMEOUT)
    if client is None:
        return None
    with client:
        try:
            return client.task_runs(task_id).model_dump(mode="json")  # the API's answer
        except ServerUnreachable as exc:
            if url is not None:
                fail(f"cannot reach the server at {client.url}: {exc.reason}")
            return None  # a recorded server that is gone: read the files
        except NotFound:
            fail(f"no task {task_id}", 1)
        except HTTPError as exc:
            fail(f"{client.url} refused to list the runs: {exc.detail}")


def _local(settings: Settings, task_id: str) -> dict[str, Any]:
    from runyard.cli.backend import LocalBackend
    from runyard.cli.errors import plain
    from runyard.cli.taskref import resolve
    from runyard.errors import RunyardError
    from runyard.workspace.history import kept_runs, runs_answer
    from runyard.workspace.layout import Workspace

    try:
        task_id = resolve(LocalBackend(settings), task_id)  # a task's name is enough
    except RunyardError as exc:
        fail(*plain(exc))
    workspace = Workspace.open(settings.workspace_dir, settings.log_dir)
    current = workspace.read_status(task_id)
    if current is None:
        fail(f"no task {task_id}", 1)
    return runs_answer(task_id, current, kept_runs(workspace, task_id))
