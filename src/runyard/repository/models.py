"""Wire shapes of the lineage queries (``get_task_graph`` / ``get_task_context``).

They are defined in :mod:`runyard.wire`, shared with the light client, and re-exported
here where the repository builds them.
"""

from __future__ import annotations

from runyard.wire import GraphEdge, GraphNode, TaskContext, TaskGraph, TaskRelations

__all__ = ["GraphEdge", "GraphNode", "TaskContext", "TaskGraph", "TaskRelations"]
