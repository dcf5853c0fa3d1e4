"""What ``runyard defs`` prints: the task definitions, the plugins that did not load and why,
and the one sentence for each task only a server restart brings up to date.

``--json`` without a name prints ``{"definitions": [...], "plugin_errors": {...},
"restart_required": {...}}``; with a name, that task's definition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runyard.cli.common import console, err_console, fail, print_json
from runyard.cli.render import definition_view, definitions_table
from runyard.cli.tables import print_table
from runyard.errors import UnknownTask

if TYPE_CHECKING:
    from runyard.cli.backend import Backend
    from runyard.tasks.base import TaskDefinition
    from runyard.wire import PluginReport


def show_definitions(backend: Backend, task: str | None, as_json: bool) -> None:
    items = backend.definitions()
    report = backend.plugin_report()
    if task is not None:
        show_one(items, report, task, as_json)
        return
    if as_json:
        print_json(
            {
                "definitions": [d.model_dump() for d in items],
                "plugin_errors": report.plugin_errors,
                "restart_required": report.restart_required,
            }
        )
        return
    print_table(definitions_table(items))  # names whole, descriptions wrapped at words
    show_problems(report)


def show_one(items: list[TaskDefinition], report: PluginReport, task: str, as_json: bool) -> None:
    found = [d for d in items if d.name == task]
    if not found:
        error = report.plugin_errors.get(task)
        fail(
            f"the plugin of task {task} did not load: {error}"
            if error
            else str(UnknownTask(task, [d.name for d in items]))  # names the closest
        )
    if as_json:
        print_json(found[0].model_dump())
    else:
        console.print(definition_view(found[0]))
    note = report.restart_required.get(task)
    if note:
        err_console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)


def show_problems(report: PluginReport) -> None:
    if report.plugin_errors:
        console.print("\n[bold red]Plugins that did not load:[/]")
        for name, error in sorted(report.plugin_errors.items()):
            console.print(f"  [bold]{name}[/]: {error}", highlight=False, soft_wrap=True)
    for sentence in (report.restart_required[name] for name in sorted(report.restart_required)):
        console.print(f"[yellow]note:[/] {sentence}", highlight=False, soft_wrap=True)
