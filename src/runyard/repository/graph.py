"""Lineage: the connected component of a task, its root and its relations.

A node's parents come from ``metadata.input_params.source_tasks`` when metadata exists,
else from ``status.config.source_tasks`` (the node is then ``provisional``). An id that is
referenced but has no records is a ``missing`` node. A node with metadata but no status
has the state ``succeeded``: metadata is only ever published on success.

Order is deterministic: nodes that exist by (created_at, task_id), then missing nodes by
task_id; edges follow the node order and, per child, the declared order of its parents.
``root_id`` is the earliest-created existing node none of whose parents exist (so a chain
hanging off a deleted upstream is rooted at its first surviving task); in a cycle with no
such node, the earliest-created existing node.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import chain

from runyard.repository.index import TaskIndex
from runyard.repository.models import GraphEdge, GraphNode, TaskGraph, TaskRelations
from runyard.repository.records import (
    CREATED_AT,
    INSTANT,
    META_CREATED_AT,
    META_INSTANT,
    META_PARENTS,
    PARENTS,
    STATE,
    created_at_text,
)
from runyard.workspace.records import TaskState


@dataclass(frozen=True, slots=True)
class LineageNode:
    task_id: str
    instant: int
    created_at: str | None
    state: TaskState | None
    parents: tuple[str, ...]
    missing: bool
    provisional: bool


def collect_component(index: TaskIndex, selected: str) -> dict[str, LineageNode]:
    """Every task connected to ``selected`` through lineage, in either direction."""
    nodes: dict[str, LineageNode] = {}
    queue = deque([selected])
    seen = {selected}
    with index.lock:
        while queue:
            task_id = queue.popleft()
            node = _node(index, task_id)
            nodes[task_id] = node
            for neighbour in chain(node.parents, sorted(index.children.get(task_id, ()))):
                if neighbour not in seen:
                    seen.add(neighbour)
                    queue.append(neighbour)
    return nodes


def _node(index: TaskIndex, task_id: str) -> LineageNode:
    meta = index.metadata.get(task_id)
    status = index.statuses.get(task_id)
    state = TaskState(status[STATE]) if status is not None else None
    if meta is not None:
        instant = meta[META_INSTANT]
        return LineageNode(
            task_id,
            instant,
            created_at_text(instant, meta[META_CREATED_AT]),
            state or TaskState.SUCCEEDED,
            meta[META_PARENTS],
            False,
            False,
        )
    if status is not None:
        instant, created_at = status[INSTANT], created_at_text(status[INSTANT], status[CREATED_AT])
        return LineageNode(task_id, instant, created_at, state, status[PARENTS], False, True)
    return LineageNode(task_id, -1, None, None, (), True, False)


def ordered_nodes(nodes: dict[str, LineageNode]) -> list[LineageNode]:
    present = sorted(
        (n for n in nodes.values() if not n.missing), key=lambda n: (n.instant, n.task_id)
    )
    absent = sorted((n for n in nodes.values() if n.missing), key=lambda n: n.task_id)
    return present + absent


def choose_root(ordered: list[LineageNode]) -> str:
    existing = {n.task_id for n in ordered if not n.missing}
    for node in ordered:
        if not node.missing and not existing.intersection(node.parents):
            return node.task_id
    return ordered[0].task_id


def build_graph(nodes: dict[str, LineageNode], selected: str) -> TaskGraph:
    ordered = ordered_nodes(nodes)
    return TaskGraph(
        root_id=choose_root(ordered),
        selected_id=selected,
        nodes=[_graph_node(n) for n in ordered],
        edges=[GraphEdge(from_=parent, to=n.task_id) for n in ordered for parent in n.parents],
    )


def _graph_node(node: LineageNode) -> GraphNode:
    kind, task_name, _ = node.task_id.split("#")
    return GraphNode(
        task_id=node.task_id,
        kind=kind,
        task_name=task_name,
        created_at=node.created_at,
        parent_ids=list(node.parents),
        state=node.state,
        missing=node.missing,
        provisional=node.provisional,
    )


def build_relations(nodes: dict[str, LineageNode], selected: str) -> TaskRelations:
    """Relations of ``selected``; ``missing`` and ``provisional`` cover the whole graph."""
    ordered = ordered_nodes(nodes)
    return TaskRelations(
        direct_upstream=list(nodes[selected].parents),
        ancestors=_ancestors(nodes, selected),
        direct_downstream=[n.task_id for n in ordered if selected in n.parents],
        missing=[n.task_id for n in ordered if n.missing],
        provisional=[n.task_id for n in ordered if n.provisional],
    )


def _ancestors(nodes: dict[str, LineageNode], selected: str) -> list[str]:
    """Upstream tasks, nearest first, each once, in declared order within a level."""
    found: list[str] = []
    seen = {selected}
    queue = deque(nodes[selected].parents)
    while queue:
        task_id = queue.popleft()
        if task_id in seen:
            continue
        seen.add(task_id)
        found.append(task_id)
        queue.extend(nodes[task_id].parents)
    return found
