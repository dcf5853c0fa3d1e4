"""Rich rendering of task records for the terminal (tables, trees, summaries)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

# rich and the record models are imported where a view is built, not at the CLI's start
if TYPE_CHECKING:
    from rich.table import Table
    from rich.tree import Tree

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


def duration(status: TaskStatus) -> str:
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


def status_table(statuses: list[TaskStatus]) -> Table:
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    widest = max((len(s.task_id) for s in statuses), default=7)
    table.add_column("TASK ID", no_wrap=True, min_width=widest)
    for column in ("STATE", "CREATED", "DURATION"):
        table.add_column(column, no_wrap=True)
    for s in statuses:
        table.add_row(
            s.task_id, state_text(s.state), s.created_at[:19].replace("T", " "), duration(s)
        )
    return table


def status_summary(status: TaskStatus) -> Table:
    from rich.table import Table

    table = Table(box=None, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("task_id", status.task_id)
    table.add_row("run_id", status.run_id)
    table.add_row("state", state_text(status.state))
    # a run that has not ended has no exit code yet (the record holds a placeholder 0)
    table.add_row("exit_code", str(status.exit_code) if status.terminal else "-")
    if status.error:
        table.add_row("error", f"[red]{status.error}[/]")
    if status.result:
        table.add_row("result", str(status.result))
    for step in status.steps:
        table.add_row(f"step {step.name}", f"{step.percentage:.0f}%")
    table.add_row("log", status.log_path)
    return table


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
