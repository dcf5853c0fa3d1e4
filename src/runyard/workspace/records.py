"""The durable records of a task folder: TaskStatus, TaskMetadata and progress steps.

``status.json`` is the mutable snapshot; ``metadata.json`` is written once on success,
carries no ``run_id``, and its ``output_params`` equals the status ``result``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runyard.wire import OPTIONAL_STATUS_FIELDS, TERMINAL_STATES, Step, TaskState, TaskStatus
from runyard.workspace.identity import is_task_id

# The status shapes are wire models (runyard.wire), shared with the light client.
__all__ = [
    "CANCEL_EXIT_CODE",
    "OPTIONAL_STATUS_FIELDS",
    "TERMINAL_STATES",
    "Step",
    "TaskMetadata",
    "TaskState",
    "TaskStatus",
    "metadata_from_dict",
    "status_from_dict",
    "utcnow",
]


CANCEL_EXIT_CODE = 130


def utcnow() -> str:
    """Current UTC time as ISO-8601 with a ``Z`` suffix (microseconds kept for ordering)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class TaskMetadata(BaseModel):
    """The ``metadata.json`` success envelope."""

    model_config = ConfigDict(extra="allow")

    task_id: str
    reg_name: str
    created_at: str
    task_type: str
    # lambdas, not ``dict``: see TaskStatus (runyard.wire)
    input_params: dict[str, Any] = Field(default_factory=lambda: {})
    output_params: dict[str, Any] = Field(default_factory=lambda: {})
    # ours: the key its result is cached under (runtime/taskcache), written only when set
    cache_key: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        if data.get("cache_key") is None:
            data.pop("cache_key", None)
        return data


def status_from_dict(data: dict[str, Any] | None, task_id: str) -> TaskStatus | None:
    """Validate a raw status; anything invalid or not matching ``task_id`` is None."""
    if data is None or data.get("task_id") != task_id:
        return None
    try:
        status = TaskStatus.model_validate(data)
    except ValidationError:
        return None
    if status.task_type != task_id.split("#", 1)[0]:
        return None
    return status


def metadata_from_dict(data: dict[str, Any] | None, task_id: str) -> TaskMetadata | None:
    if data is None or data.get("task_id") != task_id or not is_task_id(task_id):
        return None
    try:
        meta = TaskMetadata.model_validate(data)
    except ValidationError:
        return None
    if meta.task_type != task_id.split("#", 1)[0]:
        return None
    return meta
