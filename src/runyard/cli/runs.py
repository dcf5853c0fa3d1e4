"""``runyard runs TASK_ID``: the runs of a task, the current one and the earlier runs that
fixed-name reruns replaced (kept under ``<workspace>/.history``), newest first.

Through the workspace's server when one answers (``GET /api/v1/tasks/{id}/runs``), else
from the files. One line per run with its full run id, state and times (local, zone
named); ``--json`` prints the API's answer unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

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

TaskIdArg = Annotated[str, typer.Argument(help="Full task id, e.g. 'base#demo#api-demo'")]


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
    """``<run id>  <state>  created …  started …  finished …  [current]``, local times."""
    parts = [
        run["run_id"],
        f"{run['state']:<9}",
        f"created {_when(run['created_at'])}",
        f"started {_when(run['started_at'])}",
        f"finished {_when(run['finished_at'])}",
    ]
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
    import httpx

    from runyard.cli.backend import locate_server

    located = locate_server(settings, url, token)
    if located is None:
        return None
    address, bearer = located
    headers = {"authorization": f"Bearer {bearer}"} if bearer else {}
    try:
        with httpx.Client(base_url=address, headers=headers, timeout=60) as client:
            reply = client.get(f"/api/v1/tasks/{quote(task_id, safe='')}/runs")
    except httpx.TransportError as exc:
        if url is not None:
            from runyard.client.calls import transport_reason

            fail(f"cannot reach the server at {address}: {transport_reason(exc)}")
        return None  # a recorded server that is gone: read the files
    if reply.status_code == 404:
        fail(f"no task {task_id}", 1)
    if reply.status_code != 200:
        fail(f"{address} refused to list the runs: {_message(reply)}")
    answer: dict[str, Any] = reply.json()
    return answer


def _message(reply: Any) -> str:
    try:
        return str(reply.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {reply.status_code}"


def _local(settings: Settings, task_id: str) -> dict[str, Any]:
    from runyard.errors import InvalidInput
    from runyard.workspace.history import kept_runs, runs_answer
    from runyard.workspace.identity import parse_task_id
    from runyard.workspace.layout import Workspace

    try:
        parse_task_id(task_id)
    except InvalidInput as exc:
        fail(str(exc))
    workspace = Workspace.open(settings.workspace_dir, settings.log_dir)
    current = workspace.read_status(task_id)
    if current is None:
        fail(f"no task {task_id}", 1)
    return runs_answer(task_id, current, kept_runs(workspace, task_id))
