"""Task definitions, the registry and the built-in tasks."""

from runyard.tasks.base import Task, TaskDefinition, TaskExit, TaskInput, TaskOutput, TaskRun
from runyard.tasks.registry import TaskRegistry

__all__ = [
    "Task",
    "TaskDefinition",
    "TaskExit",
    "TaskInput",
    "TaskOutput",
    "TaskRegistry",
    "TaskRun",
]
