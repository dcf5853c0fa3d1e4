"""The workspace: files and records only. No server, no HTTP, imports nothing else of runyard."""

from runyard.workspace.identity import TaskType, build_task_id, parse_task_id
from runyard.workspace.layout import Workspace
from runyard.workspace.logs import TaskLogChunk, read_log_window
from runyard.workspace.records import TaskMetadata, TaskState, TaskStatus, utcnow

__all__ = [
    "TaskLogChunk",
    "TaskMetadata",
    "TaskState",
    "TaskStatus",
    "TaskType",
    "Workspace",
    "build_task_id",
    "parse_task_id",
    "read_log_window",
    "utcnow",
]
