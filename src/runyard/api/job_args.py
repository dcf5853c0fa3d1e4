"""Argument models of the thirteen jobs (seed 002): names, defaults and bounds are the contract.

Jobs documented as "only the table's fields" forbid extra fields; the others allow and
ignore them. Additions of ours are optional fields only.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runyard.resource_settings import Resources
from runyard.tasks.retrypolicy import MAX_DELAY_SECONDS, MAX_RETRIES
from runyard.workspace.logs import DEFAULT_LIMIT, MAX_LIMIT, MIN_LIMIT
from runyard.workspace.records import TaskState


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class NoArguments(Lenient):
    pass


# AxonX's ``detail``: "full" is the whole status (the seed's answer, hence the default);
# "summary" is list metadata and one progress line without the task's config or outputs.
Detail = Literal["summary", "full"]
DETAIL_DESCRIPTION = "'full' (default): the whole status; 'summary': no config, result or steps"


class ListDefinitionsArgs(Lenient):
    include_schemas: bool = Field(
        True, description="False leaves out input_schema and output_schema (AxonX addition)"
    )


class ListStatusesArgs(Lenient):
    limit: int | None = Field(None, ge=1, le=10000, description="Page size (runyard addition)")
    cursor: str | None = Field(None, description="Opaque cursor from a previous page")
    state: TaskState | None = Field(None, description="Only tasks in this state")
    task_type: str | None = Field(None, description="Only tasks of this type")
    text: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Only tasks whose id, name, state, error or config values contain this "
        "text (case-insensitive)",
    )
    detail: Detail = Field("full", description=DETAIL_DESCRIPTION)


class TaskArgs(Strict):
    task: str = Field(min_length=1, description="Task registration name, not a Task ID")


class SubmitArgs(Lenient):
    task: str = Field(min_length=1, description="Task registration name, not a Task ID")
    depends_on: list[str] | str | None = Field(
        None,
        description="Full ids of upstream tasks (a list, or a comma-separated string): the "
        "task is made at once and waits, queued, until every one has succeeded; it ends "
        "failed ('upstream failed: <id>') without running if one fails or is cancelled. "
        "Also recorded as lineage (source_tasks)",
    )
    retries: int | None = Field(
        None,
        ge=0,
        le=MAX_RETRIES,
        strict=True,  # a number: true or "3" is refused, not read as one
        description="Run a failed run again, as a new run of the same task, up to this many "
        "times (not after a cancel); default: the task class's retries, else 0",
    )
    retry_delay_seconds: float | None = Field(
        None,
        ge=0,
        le=MAX_DELAY_SECONDS,
        strict=True,
        description="Seconds before the first retry, doubled at each further one, with "
        "+-10 % jitter, at most an hour; default: the task class's, else 10",
    )
    executor: Literal["local", "kubernetes"] | None = Field(
        None,
        description="Where this run's worker runs: 'local' (this host) or 'kubernetes' "
        "(a Job); default: the server's task_executors entry, else task_executor",
    )
    cache: bool | None = Field(
        None,
        description="true: answer from an earlier succeeded run with the same cache key "
        "(task, inputs, upstream artifacts, plugin version) if there is one, with "
        "cached: true and that task's handle, running nothing; false: run it anyway; "
        "default: the task class's cache setting",
    )
    cache_expiry_seconds: float | None = Field(
        None,
        ge=0,
        description="With cache: serve only a run that finished at most this many seconds "
        "ago; default: the task class's cache_expiry_seconds, else unlimited",
    )
    resources: Resources | None = Field(
        None,
        description="What the run needs: cpus, memory_mb, gpus (0-64), gpu_type; each field "
        "given wins over the server's task_resources entry and the task class's. A local "
        "run asking for more GPUs than the server controls is refused (422)",
    )


class WaitArgs(Strict):
    task_id: str = Field(min_length=1, description="Full Task ID")
    run_id: str = Field(min_length=1, description="The run id submit returned")
    poll_interval: float = Field(1.0, gt=0, description="Polling interval in seconds")
    detail: Detail = Field("full", description=DETAIL_DESCRIPTION)


class TaskIdArgs(Lenient):
    task_id: str = Field(description="Full Task ID")


class StatusArgs(TaskIdArgs):
    detail: Detail = Field("full", description=DETAIL_DESCRIPTION)


class CancelArgs(TaskIdArgs):
    run_id: str | None = Field(
        None, min_length=1, description="Cancel only if this is still the task's current run"
    )


class StrictTaskIdArgs(Strict):
    task_id: str = Field(description="Full Task ID")


class StrictTaskIdMinArgs(Strict):
    task_id: str = Field(min_length=1, description="Full Task ID")


class ReadLogArgs(Lenient):
    task_id: str = Field(description="Full Task ID")
    offset: int = Field(-1, ge=-1, description="Start byte offset; -1 reads the tail")
    limit: int = Field(DEFAULT_LIMIT, ge=MIN_LIMIT, le=MAX_LIMIT, description="Max bytes")
    run_id: str | None = Field(
        None, min_length=1,
        description="Read this run's log (the current run or a kept earlier one); refused "
        "when the task has no such run",
    )


class StreamArgs(Strict):
    task_id: str = Field(min_length=1, description="Full Task ID")
    poll_interval: float = Field(0.5, gt=0, description="Polling interval in seconds")


class DeleteArgs(Lenient):
    task_ids: list[str] = Field(
        min_length=1,
        description="Full Task IDs to delete",
        json_schema_extra={"uniqueItems": True},
    )

    @field_validator("task_ids")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("task_ids must be unique")
        return value


def extra_inputs(args: BaseModel) -> dict[str, Any]:
    """The fields a lenient model received beyond its declared ones (submit's task inputs)."""
    return dict(args.model_extra or {})
