"""``runyard pipeline run|status|cancel|list``: pipeline runs through the workspace's server.

``run FILE.py[:NAME] [param=value ...]`` loads the file, takes its
:class:`~runyard.pipelines.build.Pipeline` (``NAME``, or the only one) and starts a run with
the given parameters over the pipeline's defaults (a value is JSON where it parses, else a
string); ``--wait`` follows the steps until every one ended and exits 1 unless all
succeeded.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from runyard.cli.common import JsonOpt, parse_fields, print_json
from runyard.cli.connect import with_client

if TYPE_CHECKING:
    from runyard.client import Client

app = typer.Typer(
    help="Run pipelines written in Python, and follow or cancel their runs.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
POLL_SECONDS = 0.25
RunIdArg = Annotated[str, typer.Argument(help="Pipeline run id (as `runyard pipeline list` shows)")]


def studio_link(base_url: str, run_id: str, client: Client | None = None) -> str:
    """The Studio's page of a pipeline run (its route ``#/pipelines/<id>``), a one-time login
    link to it where ``client`` holds the server token (:mod:`runyard.cli.studiolinks`)."""
    from runyard.cli import studiolinks

    return studiolinks.page_link(base_url, studiolinks.route("pipelines", run_id), client)


def describe(run: dict[str, Any]) -> list[str]:
    """The run in lines: its id, pipeline and state, then one line a step."""
    lines = [f"Pipeline run {run['id']} ({run['pipeline']}): {run['state']}"]
    width = max(len(step["key"]) for step in run["steps"])
    for step in run["steps"]:
        after = f"  after {', '.join(step['depends_on'])}" if step["depends_on"] else ""
        lines.append(f"  {step['key']:<{width}}  {step['state']:<9}  {step['task_id']}{after}")
        if step.get("error"):
            lines.append(f"  {'':<{width}}  {step['error']}")
    return lines


def follow(client: Client, run: dict[str, Any], echo: bool) -> dict[str, Any]:
    """Poll the run until every step ended, printing each step's new state as it comes."""
    seen = {step["key"]: step["state"] for step in run["steps"]}
    while run["state"] == "running":
        time.sleep(POLL_SECONDS)
        run = client.pipeline_run(run["id"])
        for step in run["steps"]:
            if seen.get(step["key"]) != step["state"] and echo:
                typer.echo(f"  {step['key']}: {step['state']}")
            seen[step["key"]] = step["state"]
    return run


@app.command()
@with_client
def run(
    client: Client,
    target: Annotated[str, typer.Argument(help="FILE.py[:NAME]: the file and its pipeline")],
    params: Annotated[
        list[str] | None, typer.Argument(help="param=value overrides of the pipeline's params")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run until it ends")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Start a run of a pipeline: every step is made at once, or none is."""
    from runyard.pipelines.loader import load_pipeline

    pipeline = load_pipeline(target)
    started = client.run_pipeline(pipeline, **parse_fields(params or []))
    if not as_json:
        typer.echo("\n".join(describe(started)))
        typer.echo(f"Studio: {studio_link(client.url, started['id'], client)}")
    final = follow(client, started, not as_json) if wait else started
    if as_json:
        print_json(final)
    elif wait:
        typer.echo("\n".join(describe(final)))
    if wait and final["state"] != "succeeded":
        raise typer.Exit(1)


@app.command()
@with_client
def status(client: Client, run_id: RunIdArg, as_json: JsonOpt = False) -> None:
    """Show a pipeline run and the live state of each step."""
    answer = client.pipeline_run(run_id)
    if as_json:
        print_json(answer)
        return
    typer.echo("\n".join(describe(answer)))


@app.command()
@with_client
def cancel(client: Client, run_id: RunIdArg, as_json: JsonOpt = False) -> None:
    """Cancel a pipeline run's unfinished steps (waiting ones end cancelled too)."""
    answer = client.cancel_pipeline_run(run_id)
    if as_json:
        print_json(answer)
        return
    typer.echo(f"Cancelled {len(answer['cancelled'])} step(s) of {run_id}")
    typer.echo("\n".join(describe(answer)))


@app.command(name="list")
@with_client
def list_runs(
    client: Client,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many, newest first")] = 20,
    as_json: JsonOpt = False,
) -> None:
    """List pipeline runs, newest first, with their state."""
    answer = client.pipeline_runs(limit=limit)
    if as_json:
        print_json(answer)
        return
    if not answer["items"]:
        typer.echo("No pipeline runs yet: start one with `runyard pipeline run FILE.py`.")
    for item in answer["items"]:
        done = sum(step["state"] == "succeeded" for step in item["steps"])
        typer.echo(f"{item['id']}  {item['state']:<9}  {done}/{len(item['steps'])} succeeded  "
                   f"{item['created_at']}")  # fmt: skip
