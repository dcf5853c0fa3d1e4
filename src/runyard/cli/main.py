"""The ``runyard`` command line: thin commands over the workspace, the runtime and the API."""

from __future__ import annotations

import typer

from runyard.cli import agent, backup, example, sync, tasks
from runyard.cli.config_cmd import config, info
from runyard.cli.gc import gc
from runyard.cli.mcp import mcp
from runyard.cli.serve import serve
from runyard.cli.watch import watch

app = typer.Typer(
    name="runyard",
    help="Run research tasks and agent runs with durable, inspectable records.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command()(serve)
for command in (
    tasks.run, tasks.submit, tasks.wait, tasks.status, tasks.ls, tasks.logs, tasks.graph,
    tasks.context, tasks.cancel, tasks.rm, tasks.defs,
):  # fmt: skip
    app.command()(command)
app.command()(watch)
app.command()(mcp)
app.command()(gc)
app.command()(config)
app.command()(info)
app.add_typer(agent.app, name="agent")
app.add_typer(example.app, name="example")
app.add_typer(backup.app, name="backup")
app.add_typer(sync.app, name="sync")


def main() -> None:
    app()
