"""``runyard schedule list|create|pause|resume|trigger|delete|history|backfill``: cron
schedules through the workspace's server (``/api/v1/schedules``, its admin token)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from runyard.cli.common import JsonOpt, parse_fields, print_json
from runyard.cli.connect import with_client

if TYPE_CHECKING:
    from runyard.client import Client

app = typer.Typer(
    help="Cron schedules that submit task runs: list, make, pause, trigger, backfill.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
NameArg = Annotated[str, typer.Argument(help="Schedule name")]


def one_line(s: dict[str, Any]) -> str:
    when = "paused" if s["paused"] else f"next {s['next_run_at']}"
    return f"{s['name']}  {s['cron']} ({s['timezone']})  {s['task']}  {when}  [{s['origin']}]"


def record_line(r: dict[str, Any]) -> str:
    what = r["task_id"] or r["reason"] or r["error"]
    tick = f"  tick {r['tick']}" if r.get("tick") else ""
    return f"{r['triggered_at']}  {r['kind']:<8}  {r['outcome']:<9}{tick}  {what}"


@app.command("list")
@with_client
def list_(client: Client, as_json: JsonOpt = False) -> None:
    """Every schedule: its cron, zone, task and next run."""
    items = client.schedules.list()
    if as_json:
        print_json(items)
        return
    for item in items:
        typer.echo(one_line(item))
    if not items:
        typer.echo("No schedules (add them under schedules: in runyard.yaml, or create one)")


@app.command()
@with_client
def create(
    client: Client,
    name: NameArg,
    job: Annotated[str, typer.Option("--task", "--job", help="The task each tick runs")],
    cron: Annotated[str, typer.Option(help="Five cron fields, e.g. '0 16 * * 1-5'")],
    arguments: Annotated[
        list[str] | None, typer.Argument(help="key=value inputs of each run (JSON values)")
    ] = None,
    timezone: Annotated[str, typer.Option("--timezone", "--tz", help="IANA zone")] = "UTC",
    policy: Annotated[
        str, typer.Option("--policy", help="forbid, allow or replace an active run")
    ] = "forbid",
    catch_up: Annotated[str, typer.Option(help="latest or none")] = "latest",
    tick_argument: Annotated[
        str | None, typer.Option(help="Input that receives each tick's time")
    ] = None,
    description: Annotated[str, typer.Option(help="What it is for")] = "",
    retention_days: Annotated[int, typer.Option(help="Days of trigger history kept")] = 7,
    as_json: JsonOpt = False,
) -> None:
    """Make a schedule; it is kept in the workspace across restarts."""
    made = client.schedules.create(
        name, job=job, cron=cron, arguments=parse_fields(arguments or []), timezone=timezone,
        concurrency_policy=policy, catch_up=catch_up, tick_argument=tick_argument,
        description=description, history_retention_days=retention_days,
    )  # fmt: skip
    if as_json:
        print_json(made)
    else:
        typer.echo(f"Created {one_line(made)}")


@app.command()
@with_client
def pause(client: Client, name: NameArg) -> None:
    """Stop a schedule's ticks (kept across restarts) until it is resumed."""
    typer.echo(f"Paused {one_line(client.schedules.pause(name))}")


@app.command()
@with_client
def resume(client: Client, name: NameArg) -> None:
    """Tick again from now on (ticks that came while paused are not run)."""
    typer.echo(f"Resumed {one_line(client.schedules.resume(name))}")


@app.command()
@with_client
def delete(client: Client, name: NameArg) -> None:
    """Delete a schedule made over the API, with its history."""
    client.schedules.delete(name)
    typer.echo(f"Deleted {name}")


@app.command()
@with_client
def trigger(client: Client, name: NameArg, as_json: JsonOpt = False) -> None:
    """Run a schedule now, under its concurrency policy."""
    record = client.schedules.trigger(name)
    if as_json:
        print_json(record)
    else:
        typer.echo(record_line(record))
    if record["outcome"] == "failed":
        raise typer.Exit(1)


@app.command()
@with_client
def history(
    client: Client,
    name: NameArg,
    limit: Annotated[int, typer.Option(help="Most recent records (1-200)")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """A schedule's triggers, oldest first: time, kind, outcome, task id or reason."""
    answer = client.schedules.history(name, limit)
    if as_json:
        print_json(answer)
        return
    for record in answer["history"]:
        typer.echo(record_line(record))


@app.command()
@with_client
def backfill(
    client: Client,
    name: NameArg,
    first: Annotated[str, typer.Option("--from", help="Start, ISO-8601 (the zone's if bare)")],
    last: Annotated[str, typer.Option("--to", help="End, ISO-8601, in the past")],
    as_json: JsonOpt = False,
) -> None:
    """Submit one run per tick in the range (at most 500), the tick's time as
    ``tick_argument`` when the schedule names one."""
    records = client.schedules.backfill(name, first, last)
    if as_json:
        print_json(records)
        return
    for record in records:
        typer.echo(record_line(record))
    typer.echo(f"{sum(r['outcome'] == 'submitted' for r in records)} runs submitted")
