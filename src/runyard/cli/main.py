"""The ``runyard`` command line: thin commands over the workspace, the runtime and the API.

Start-up cost matters for a command typed many times a day: this module and every command
module import only typer and light runyard modules; what a command needs (settings,
client, runtime, rich) is imported when it runs (``tests/cli/test_start_imports.py``).
"""

from __future__ import annotations

from typing import Annotated

import typer

from runyard.cli import agent, backup, example, kubernetes, pipeline, schedules, sync, tasks
from runyard.cli.config_cmd import config, info
from runyard.cli.gc import gc
from runyard.cli.lazyapp import LazyTyper
from runyard.cli.mcp import mcp
from runyard.cli.runs import runs
from runyard.cli.serve import serve
from runyard.cli.studio import studio
from runyard.cli.tracking import compare, metrics
from runyard.cli.watch import watch

app = LazyTyper(
    name="runyard",
    help="Run research tasks and agent runs with durable, inspectable records.",
    no_args_is_help=True,
    add_completion=True,
    # click's plain help: rich's help renderer alone costs twice typer's own import
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("runyard")
        except PackageNotFoundError:  # a source tree that was never installed
            number = "unknown"
        typer.echo(f"runyard {number}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit"
        ),
    ] = False,
) -> None:
    """Run research tasks and agent runs with durable, inspectable records."""


app.command()(serve)
app.command()(studio)
for command in (
    tasks.run, tasks.submit, tasks.wait, tasks.status, tasks.ls, tasks.logs, tasks.graph,
    tasks.context, tasks.cancel, tasks.rm, tasks.defs,
):  # fmt: skip
    app.command()(command)
app.command()(watch)
app.command()(mcp)
app.command()(gc)
app.command()(runs)
app.command()(metrics)
app.command()(compare)
app.command()(config)
app.command()(info)
app.add_typer(agent.app, name="agent")
app.add_typer(example.app, name="example")
app.add_typer(pipeline.app, name="pipeline")
app.add_typer(schedules.app, name="schedule")
app.add_typer(backup.app, name="backup")
app.add_typer(sync.app, name="sync")
app.add_typer(kubernetes.app, name="kubernetes")


def main() -> None:
    # named as the console script is, so ``python -m runyard`` completes and helps alike
    app(prog_name="runyard")
