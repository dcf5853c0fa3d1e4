"""Wire shapes of the lineage queries (``get_task_graph`` / ``get_task_context``).

>>> edge = GraphEdge.model_validate({"from": "base#demo#a", "to": "base#demo#b"})
>>> edge.model_dump()
{'from': 'base#demo#a', 'to': 'base#demo#b'}
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from runyard.workspace.records import TaskState, TaskStatus


class GraphNode(BaseModel):
    """One task of a lineage graph.

    ``missing``: referenced as an upstream but has no records. ``provisional``: its
    parents come from the status ``config`` because no metadata has been published yet.
    """

    task_id: str
    kind: str
    task_name: str
    created_at: str | None
    parent_ids: list[str]
    state: TaskState | None
    missing: bool = False
    provisional: bool = False


class GraphEdge(BaseModel):
    """``{"from": parent, "to": child}`` on the wire; ``from_`` in Python."""

    model_config = ConfigDict(validate_by_name=True, serialize_by_alias=True)

    from_: str = Field(validation_alias="from", serialization_alias="from")
    to: str


class TaskGraph(BaseModel):
    """The connected component (upstream and downstream, transitively) of ``selected_id``."""

    root_id: str
    selected_id: str
    nodes: list[GraphNode]
    edges: list[GraphEdge]


class TaskRelations(BaseModel):
    direct_upstream: list[str]
    ancestors: list[str]
    direct_downstream: list[str]
    missing: list[str]
    provisional: list[str]


class TaskContext(BaseModel):
    """What an agent needs to know about one task: records, paths and lineage."""

    task_id: str
    status: TaskStatus | None
    metadata_exists: bool
    metadata_path: str
    log_path: str | None
    graph: TaskGraph
    relations: TaskRelations
