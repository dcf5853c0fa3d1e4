"""The ``runyard`` command line: thin commands over the workspace, the runtime and the API."""

from __future__ import annotations

import typer

from runyard.cli.serve import serve

app = typer.Typer(
    name="runyard",
    help="Run research tasks and agent runs with durable, inspectable records.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command()(serve)


def main() -> None:
    app()
