"""``runyard watch``: a live progress bar per step and the log tail, until the task ends."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from runyard.cli.common import JsonOpt, console, fail, print_json
from runyard.cli.connect import with_client
from runyard.cli.errors import EXIT_FAILED, job_failure
from runyard.cli.interrupt import looking_at
from runyard.cli.render import status_summary

if TYPE_CHECKING:  # imported when the command runs, not at the CLI's start
    from rich.console import Group
    from rich.progress import TaskID

    from runyard.client import Client, LogEvent, ProgressEvent, ResultEvent

TAIL_LINES = 15


class _View:
    def __init__(self) -> None:
        from rich.progress import BarColumn, Progress, TextColumn

        self.progress = Progress(
            TextColumn("{task.description:<20}"),
            BarColumn(),
            TextColumn("{task.percentage:>5.1f}%"),
        )
        self.bars: dict[str, TaskID] = {}
        self.tail: list[str] = []

    def on_progress(self, event: ProgressEvent) -> None:
        if event.name not in self.bars:
            self.bars[event.name] = self.progress.add_task(event.name, total=100)
        self.progress.update(self.bars[event.name], completed=event.percentage)

    def on_log(self, event: LogEvent) -> None:
        self.tail = (self.tail + event.chunk.content.splitlines())[-TAIL_LINES:]

    def render(self) -> Group:
        from rich.console import Group
        from rich.text import Text

        return Group(self.progress, Text("\n".join(self.tail), style="dim"))


@with_client
def watch(
    client: Client,
    task_id: Annotated[str, typer.Argument(help="Full task id")],
    as_json: JsonOpt = False,
) -> None:
    """Follow a task live (progress per step and log) until it ends.

    Ctrl-C stops watching, not the task: it says how to cancel it and exits 130.
    """
    with looking_at(task_id):
        result = _follow(client, task_id, as_json)
    if result is None:
        fail(
            f"The server closed the stream before {task_id} ended; it may still be running "
            f"(see `runyard status {task_id}`)",
            EXIT_FAILED,
        )
    if result.status is None:
        fail(*job_failure("stream_task", result.answer))
    if as_json:
        print_json(result.status.to_json())
    else:
        console.print(status_summary(result.status))
    if not result.success:
        raise typer.Exit(result.status.exit_code or 1)


def _follow(client: Client, task_id: str, as_json: bool) -> ResultEvent | None:
    from rich.live import Live

    from runyard.client import LogEvent, ProgressEvent

    view = _View()
    result: ResultEvent | None = None
    with Live(view.render(), console=console, refresh_per_second=10, transient=as_json) as live:
        for event in client.stream(task_id):
            if isinstance(event, ProgressEvent):
                view.on_progress(event)
            elif isinstance(event, LogEvent):
                view.on_log(event)
            else:
                result = event
            live.update(view.render())
    if not console.is_terminal:
        # off a terminal the last frame ends without a line break (rich adds one only on a
        # terminal): without this the summary would start on the log's last line
        console.line()
    return result
