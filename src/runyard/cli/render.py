"""Rich rendering of task records for the terminal (tables, trees, summaries).

Times follow one rule, the Studio's: local time of this machine, to the second, with the
zone named — in each value of a summary (``2026-11-29 15:04:05 CET``) and in the column
header of a table (``CREATED (CET)``). Records keep UTC; only the view converts.

Text that comes from a task (errors, results, descriptions) is shown as text, never read
as rich markup.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

# rich and the record models are imported where a view is built, not at the CLI's start
if TYPE_CHECKING:
    from rich.console import Group
    from rich.table import Table
    from rich.tree import Tree

    from runyard.cli.paging import StatusRow
    from runyard.repository.models import TaskGraph
    from runyard.workspace.records import TaskStatus

STATE_STYLES = {
    "queued": "yellow",
    "running": "cyan",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "magenta",
}


def state_text(state: str) -> str:
    return f"[{STATE_STYLES.get(state, 'white')}]{state}[/]"


def duration(status: StatusRow) -> str:
    if not status.started_at:
        return ""
    end = status.finished_at or datetime.now().astimezone().isoformat()
    try:
        seconds = (_parse(end) - _parse(status.started_at)).total_seconds()
    except ValueError:
        return ""
    return f"{seconds:.1f}s" if seconds < 120 else f"{seconds / 60:.1f}m"


def _parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def local_zone() -> str:
    """The abbreviation of this machine's zone now (``CET``, ``UTC``...)."""
    return datetime.now().astimezone().tzname() or "local"


def local_time(value: str | None, *, with_zone: bool = True) -> str:
    """An ISO instant from a record as local time; ``""`` when absent, as is when not ISO."""
    if not value:
        return ""
    try:
        moment = _parse(value).astimezone()
    except ValueError:
        return value
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    return f"{text} {moment.tzname()}" if with_zone else text


def _status_cells(statuses: Sequence[StatusRow]) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of a listing, as text."""
    header = ["TASK ID", "STATE", f"CREATED ({local_zone()})", "DURATION"]
    rows = [
        [s.task_id, str(s.state), local_time(s.created_at, with_zone=False), duration(s)]
        for s in statuses
    ]
    return header, rows


def status_table(statuses: Sequence[StatusRow]) -> Table:
    """The listing for a terminal; print it with :func:`runyard.cli.tables.print_table`,
    which never cuts a task id (the table grows wider than the terminal instead)."""
    from runyard.cli.tables import Column, grid

    header, rows = _status_cells(statuses)
    # the id and the short cells whole; the creation time gives way (its date above its time)
    columns = [Column(header[0], is_id=True), Column(header[1], whole=True, markup=True),
               Column(header[2]), Column(header[3], whole=True)]  # fmt: skip
    return grid(columns, [[task_id, state_text(state), *rest] for task_id, state, *rest in rows])


def status_text(statuses: Sequence[StatusRow]) -> str:
    """The listing of :func:`status_table` as plain text, for a pipe or a file: columns two
    spaces apart, nothing cut or wrapped, no styles (and rich is not even imported)."""
    header, rows = _status_cells(statuses)
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = (
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in (header, *rows)
    )
    return "\n".join(lines)


def status_summary(status: TaskStatus) -> Group:
    """One task's status: ids, state, times, duration, error, steps, log, then the result
    in full as indented JSON (never cut short)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    table.add_row("task_id", Text(status.task_id))
    table.add_row("run_id", Text(status.run_id))
    table.add_row("state", state_text(status.state))
    # a run that has not ended has no exit code yet (the record holds a placeholder 0)
    table.add_row("exit_code", str(status.exit_code) if status.terminal else "-")
    for label, value in (
        ("created", status.created_at), ("started", status.started_at),
        ("finished", status.finished_at),
    ):  # fmt: skip
        if value:
            table.add_row(label, local_time(value))
    if status.started_at:
        table.add_row("duration", duration(status))
    if status.waiting_for:
        table.add_row("waiting for", Text(", ".join(status.waiting_for)))
    if status.queued_reason:
        table.add_row("queued", Text(status.queued_reason))
    if status.attempt is not None:
        table.add_row("attempt", f"{status.attempt} of {(status.retries or 0) + 1}")
    if status.error:
        table.add_row("error", Text(status.error, style="red"))
    for step in status.steps:
        table.add_row(Text(f"step {step.name}"), f"{step.percentage:.0f}%")
    table.add_row("log", Text(status.log_path))
    if status.result is None:
        return Group(table)
    indented = "\n".join("  " + line for line in pretty_json(status.result).splitlines())
    return Group(table, Text("result", style="bold"), Text(indented))


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON, Unicode kept; what JSON cannot hold is shown as text."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def definition_view(definition: Any) -> Group:
    """A task definition for people: name, origin, description, then its input and output
    fields as tables (type, required, default, description) instead of JSON Schema."""
    from rich.console import Group
    from rich.text import Text

    origin = definition.source + (f" {definition.plugin}" if definition.plugin else "")
    head = Text.assemble((definition.name, "bold"), f"  task type {definition.task_type}, {origin}")
    parts: list[Any] = [head]
    if definition.description:
        parts.append(Text(definition.description))
    for title, schema in (("INPUT", definition.input_schema), ("OUTPUT", definition.output_schema)):
        parts += [Text(""), fields_table(title, schema)]
    return Group(*parts)


def definitions_table(definitions: Sequence[Any]) -> Table:
    """``runyard defs``: one row per task, its name whole (it is what submit takes), the
    description as one paragraph wrapped at words."""
    from runyard.cli.tables import Column, grid

    columns = [Column("TASK", is_id=True), Column("TYPE", whole=True), Column("SOURCE", whole=True),
               Column("DESCRIPTION")]  # fmt: skip
    rows = [[d.name, d.task_type, d.source, " ".join((d.description or "").split())]
            for d in definitions]  # fmt: skip
    return grid(columns, rows)


def fields_table(title: str, schema: dict[str, Any]) -> Table:
    """The top-level properties of a JSON Schema object as rows."""
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in (title, "TYPE", "REQUIRED", "DEFAULT", "DESCRIPTION"):
        table.add_column(column, overflow="fold")
    required = set(schema.get("required", []))
    definitions = schema.get("$defs", {})
    for name, prop in schema.get("properties", {}).items():
        default = pretty_json(prop["default"]) if "default" in prop else ""
        table.add_row(
            Text(name), Text(schema_type(prop, definitions)),
            "yes" if name in required else "no", Text(default),
            Text(prop.get("description", "")),
        )  # fmt: skip
    if not schema.get("properties"):
        table.add_row(Text("(none)", style="dim"), "", "", "", "")
    return table


def schema_type(prop: dict[str, Any], definitions: dict[str, Any]) -> str:
    """A JSON Schema type in a few words: ``integer``, ``string | null``, ``array of number``,
    ``one of "a", "b"``, or a referenced model's name."""
    if "enum" in prop:
        return "one of " + ", ".join(json.dumps(item) for item in prop["enum"])
    if "$ref" in prop:
        name = str(prop["$ref"]).rsplit("/", 1)[-1]
        target = definitions.get(name, {})
        return schema_type(target, definitions) if "enum" in target else name
    for key in ("anyOf", "oneOf"):
        if key in prop:
            return " | ".join(schema_type(option, definitions) for option in prop[key])
    kind = prop.get("type", "any")
    if isinstance(kind, list):
        return " | ".join(str(item) for item in kind)
    if kind == "array" and isinstance(prop.get("items"), dict):
        return f"array of {schema_type(prop['items'], definitions)}"
    return str(kind)


def graph_tree(graph: TaskGraph) -> Tree:
    """The lineage as a tree from each parentless node down (shared children repeat)."""
    from rich.tree import Tree

    nodes = {node.task_id: node for node in graph.nodes}
    children: dict[str, list[str]] = {node_id: [] for node_id in nodes}
    for edge in graph.edges:
        children.setdefault(edge.from_, []).append(edge.to)
    roots = [n.task_id for n in graph.nodes if not n.parent_ids] or [graph.root_id]
    tree = Tree(f"lineage of [bold]{graph.selected_id}[/]")

    def label(node_id: str) -> str:
        node = nodes.get(node_id)
        marks = []
        if node is None or node.missing:
            marks.append("[red]missing[/]")
        elif node.provisional:
            marks.append("[yellow]provisional[/]")
        state = state_text(node.state) if node is not None and node.state else ""
        text = f"[bold]{node_id}[/]" if node_id == graph.selected_id else node_id
        return " ".join(part for part in (text, state, *marks) if part)

    def add(branch: Tree, node_id: str, seen: frozenset[str]) -> None:
        sub = branch.add(label(node_id))
        for child in sorted(children.get(node_id, [])):
            if child not in seen:
                add(sub, child, seen | {child})

    for root in sorted(roots):
        add(tree, root, frozenset({root}))
    return tree
