"""TaskRepository: the live index of task records, and its lineage queries."""

from runyard.repository.models import (
    GraphEdge,
    GraphNode,
    TaskContext,
    TaskGraph,
    TaskRelations,
)
from runyard.repository.repository import TaskRepository

__all__ = [
    "GraphEdge",
    "GraphNode",
    "TaskContext",
    "TaskGraph",
    "TaskRelations",
    "TaskRepository",
]
