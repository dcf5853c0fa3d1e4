"""The durable records of a task folder: TaskStatus, TaskMetadata and progress steps.

``status.json`` is the mutable snapshot; ``metadata.json`` is written once on success,
carries no ``run_id``, and its ``output_params`` equals the status ``result``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runyard.workspace.identity import is_task_id


class TaskState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED})
CANCEL_EXIT_CODE = 130


def utcnow() -> str:
    """Current UTC time as ISO-8601 with a ``Z`` suffix (microseconds kept for ordering)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Step(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    started_at: str | None = None
    finished_at: str | None = None
    percentage: float = 0.0


class TaskStatus(BaseModel):
    """The ``status.json`` snapshot and the answer of ``status`` / ``wait_task``."""

    model_config = ConfigDict(extra="allow")

    task_id: str
    run_id: str
    task_type: str
    task_name: str
    state: TaskState
    config: dict[str, Any] = Field(default_factory=dict)
    created_at: str
    started_at: str | None = None
    finished_at: str | None = None
    pid: int | None = None
    exit_code: int = 0
    error: str = ""
    result: dict[str, Any] = Field(default_factory=dict)
    steps: list[Step] = Field(default_factory=list)
    log_path: str = ""
    # ours, beyond the seed: written only when known, so a seed-written status reads as-is
    submitted_by: str | dict[str, str] | None = None
    limits: dict[str, Any] | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def to_json(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        for name in OPTIONAL_STATUS_FIELDS:
            if data.get(name) is None:
                data.pop(name, None)
        return data


OPTIONAL_STATUS_FIELDS = ("submitted_by", "limits", "synced_from")


class TaskMetadata(BaseModel):
    """The ``metadata.json`` success envelope."""

    model_config = ConfigDict(extra="allow")

    task_id: str
    reg_name: str
    created_at: str
    task_type: str
    input_params: dict[str, Any] = Field(default_factory=dict)
    output_params: dict[str, Any] = Field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


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
