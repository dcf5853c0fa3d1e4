"""The wire shapes of the Job API, shared by the server and :mod:`runyard.client`.

A status, a submit handle, a log window, a task definition and the lineage answers are
plain pydantic models with no behaviour beyond validation. They live here, importing
nothing else of runyard, so that the client reads them without loading the server,
the runtime or the repository; the server modules that own their meaning
(``workspace.records``, ``workspace.logs``, ``runtime.launch``, ``tasks.base``,
``repository.models``) re-export them, so each class exists exactly once.

>>> edge = GraphEdge.model_validate({"from": "base#demo#a", "to": "base#demo#b"})
>>> edge.model_dump()
{'from': 'base#demo#a', 'to': 'base#demo#b'}
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

__all__ = [
    "OPTIONAL_STATUS_FIELDS",
    "TERMINAL_STATES",
    "GraphEdge",
    "GraphNode",
    "PluginReport",
    "Step",
    "TaskContext",
    "TaskDefinition",
    "TaskGraph",
    "TaskHandle",
    "TaskLogChunk",
    "TaskFile",
    "TaskRelations",
    "TaskRunEntry",
    "TaskRuns",
    "TaskState",
    "TaskStatus",
]


class TaskState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


# A run id is one path component (a uuid4 hex where runyard made it): letters, digits,
# '_' and '-', never '.', '/' or empty.
RUN_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
TERMINAL_STATES = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED})


class Step(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    started_at: str | None = None
    finished_at: str | None = None
    percentage: float = 0.0


class TaskStatus(BaseModel):
    """The ``status.json`` snapshot and the answer of ``status`` / ``wait_task``."""

    model_config = ConfigDict(extra="allow")

    # The default factories are lambdas, not ``dict``/``list``: pydantic reads a factory's
    # signature, and a builtin's is parsed from its text by tokenize's regular expression,
    # compiled on first use (2 ms of every process that loads the records, a CLI listing's)
    task_id: str
    # one path component: the server derives the run's log and history paths from it
    run_id: str = Field(pattern=RUN_ID_PATTERN)
    task_type: str
    task_name: str
    state: TaskState
    config: dict[str, Any] = Field(default_factory=lambda: {})
    created_at: str
    started_at: str | None = None
    finished_at: str | None = None
    pid: int | None = None
    exit_code: int = 0
    error: str = ""
    result: dict[str, Any] = Field(default_factory=lambda: {})
    steps: list[Step] = Field(default_factory=lambda: [])
    log_path: str = ""
    # ours, beyond the seed: written only when known, so a seed-written status reads as-is
    submitted_by: str | dict[str, str] | None = None
    limits: dict[str, Any] | None = None
    # what the run asked for (runyard.resource_settings) and, locally, the GPUs granted to
    # it as it launched: {"cpus": 2.0, "gpus": 1, "gpu_devices": [0]} (runtime/gpus)
    resources: dict[str, Any] | None = None
    # why a queued run is not launched yet, while that is not a free slot (runtime/spacewait)
    queued_reason: str | None = None
    # the upstream tasks it waits for before it may queue for a slot (depends_on)
    waiting_for: list[str] | None = None
    # retries (runtime/retries), written only when a submit or its task class asked for
    # them: which attempt this run is (1-based), how many retries in all, the base delay,
    # when a waiting retry may queue for a slot, and the run id of the first attempt
    attempt: int | None = None
    retries: int | None = None
    retry_delay_seconds: float | None = None
    retry_at: str | None = None
    retry_of: str | None = Field(None, pattern=RUN_ID_PATTERN)
    # its result is cached (runtime/taskcache): recorded under cache_key when it succeeds
    # (a run waiting for its upstreams gets its key once they succeeded)
    cache: bool | None = None
    cache_key: str | None = None
    # experiment tracking (runyard.tracking): the params the run logged (its inputs are the
    # others) and a summary per metric, {"last", "min", "max", "step", "count"}; a
    # non-finite value is "NaN", "Infinity" or "-Infinity", never a bare float (whatever a
    # forged status holds), so every JSON answer that carries a status stays valid JSON
    params: dict[str, Any] | None = None
    metrics: dict[str, dict[str, Any]] | None = None
    # a run no worker records: its client logs it and ends it (api/mlflow: MLflow's client,
    # {"by": "mlflow", "tags": {...}, "user_id": ...}); liveness checks leave it alone
    tracked: dict[str, Any] | None = None

    @field_validator("params", "metrics")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        return finite_json(value)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def to_json(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        for name in OPTIONAL_STATUS_FIELDS:
            if data.get(name) is None:
                data.pop(name, None)
        return data


def finite_json(value: Any, depth: int = 0) -> Any:
    """``value`` with every non-finite float in it replaced by its name ("NaN",
    "Infinity", "-Infinity"): JSON has no number for them, and strict encoders fail on them.
    Past 32 levels of nesting (no record of ours goes so deep) a value is None."""
    if depth > 32:
        return None
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, dict):
        return {key: finite_json(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [finite_json(item, depth + 1) for item in value]
    return value


OPTIONAL_STATUS_FIELDS = (
    "submitted_by", "limits", "resources", "synced_from", "queued_reason", "waiting_for",
    "attempt", "retries", "retry_delay_seconds", "retry_at", "retry_of",
    "cache", "cache_key", "params", "metrics", "tracked",
)


class TaskHandle(BaseModel):
    """What a submit answers: the task id, the run id of this submission and the task.

    ``cached`` is true when an earlier run's cached result answered the submit (the handle
    is that run's, nothing ran). It is sent only then, so every other answer keeps the
    seed's three fields, and clients that do not know it ignore it.
    """

    task_id: str
    run_id: str
    task: str
    cached: bool = False

    @model_serializer(mode="wrap")
    def _cached_only_when_true(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and not data.get("cached"):
            data.pop("cached", None)
        return data


class TaskLogChunk(BaseModel):
    """A window of a task's log: ``content`` is the bytes ``[start_offset, next_offset)``."""

    content: str
    start_offset: int
    next_offset: int
    file_size: int
    has_more_before: bool
    has_more_after: bool
    reset: bool


class TaskDefinition(BaseModel):
    """An installed task: its name, where it comes from, and its input/output schemas."""

    name: str
    source: Literal["native", "plugin"]
    plugin: str | None = None
    task_type: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]


class PluginReport(BaseModel):
    """What ``GET /api/v1/plugins`` and ``POST /api/v1/plugins/rescan`` answer: the task
    names, the plugins that did not load and why, and the tasks only a restart updates."""

    tasks: list[str] = Field(description="The task names the server can run, sorted")
    added: list[str] = Field(
        default_factory=list, description="Tasks this rescan found (empty for a plain read)"
    )
    plugin_errors: dict[str, str] = Field(
        default_factory=dict, description="Entry point name -> why that plugin did not load"
    )
    restart_required: dict[str, str] = Field(
        default_factory=dict,
        description="Task name -> one sentence on the change only a server restart brings in",
    )


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


class TaskRunEntry(BaseModel):
    """One run of a task as ``GET /api/v1/tasks/{id}/runs`` lists it: the current run, or
    one a fixed-name rerun replaced (whose records are kept, not its files)."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    state: TaskState
    created_at: str
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int = 0
    error: str = ""
    current: bool = False


class TaskRuns(BaseModel):
    """A task's runs, newest first, the current one first of all."""

    task_id: str
    runs: list[TaskRunEntry]


class TaskFile(BaseModel):
    """A file of a task folder as ``GET /api/v1/tasks/{id}/files`` lists it: ``path`` is
    the name a download takes (bytes that are not UTF-8 written ``\\xNN``)."""

    path: str
    size: int
