"""The task definition API.

A task is a class with a docstring (its description), a ``task_type``, a pydantic input
model derived from :class:`TaskInput`, an output model derived from :class:`TaskOutput`,
ordered ``steps`` and a ``run`` method::

    class Square(Task):
        \"\"\"Square a number.\"\"\"

        task_type = TaskType.BASE
        Input = SquareInput          # TaskInput subclass with ``n: int``
        Output = SquareOutput        # TaskOutput subclass with ``value: int``
        steps = ("compute",)

        def run(self, inputs: SquareInput, run: TaskRun) -> SquareOutput:
            with run.step("compute"):
                return SquareOutput(value=inputs.n ** 2)

Plugins register in the entry-point group ``runyard.tasks`` as ``name = "module:Class"``.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runyard.errors import InvalidInput
from runyard.resource_settings import Resources, parse_resources
from runyard.tasks.retrypolicy import check_policy
from runyard.wire import TaskDefinition  # a wire model, shared with the light client
from runyard.workspace.identity import (
    TaskType,
    normalise_source_tasks,
    validate_task_name,
)


class TaskInput(BaseModel):
    """Inputs every task accepts; unknown fields fail."""

    model_config = ConfigDict(extra="forbid")

    task_name: str | None = Field(
        None,
        description="Fixed instance name (1-32 letters, digits, '-'); omitted or empty: generated",
    )
    source_tasks: str = Field(
        "", description="Full upstream task ids, comma-separated (a string, not a list)"
    )

    @field_validator("task_name")
    @classmethod
    def _task_name(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        return validate_task_name(value)

    @field_validator("source_tasks", mode="before")
    @classmethod
    def _source_tasks(cls, value: object) -> str:
        return normalise_source_tasks(value)


class ArtifactRef(BaseModel):
    path: str
    size: int
    sha256: str


class TaskOutput(BaseModel):
    """Outputs; ``artifacts`` is filled from what the task recorded."""

    model_config = ConfigDict(extra="forbid")

    artifacts: dict[str, ArtifactRef] = Field(default_factory=dict)


class TaskRun(ABC):
    """What a running task body sees: its folder, progress reporting, artifact recording."""

    task_id: str
    run_id: str
    task_dir: Path

    @abstractmethod
    def step(self, name: str) -> AbstractContextManager[None]:
        """Mark step ``name`` started on enter and 100 % finished on exit."""

    @abstractmethod
    def progress(self, name: str, percentage: float) -> None:
        """Report progress of a step; it never goes backwards."""

    @abstractmethod
    def record_artifact(self, name: str, path: str) -> ArtifactRef:
        """Record a finished file (path relative to the task folder) under ``name``."""

    @abstractmethod
    def log(self, message: str) -> None:
        """Write a line to this run's log."""

    @abstractmethod
    def log_metric(self, name: str, value: float, step: int | None = None) -> None:
        """Record ``value`` of metric ``name`` at ``step`` (None: the metric's next step,
        0 for its first). Names follow MLflow's rule (1-250 letters, digits, ``_-./ :``,
        not starting with ``/``); a value is any number (``float()`` of it: numpy scalars
        too), NaN and infinities included. A bad name or value raises
        :class:`~runyard.errors.InvalidInput` (a ``ValueError``). Buffered: cheap to call
        thousands of times a second (see ``docs/tracking.md``)."""

    @abstractmethod
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """:meth:`log_metric` of each ``name: value`` of ``metrics`` at one ``step``."""

    @abstractmethod
    def log_params(self, params: Mapping[str, Any]) -> None:
        """Add params to this run's (its inputs are its params already): names as metric
        names, values JSON scalars (str, int, float, bool, None), a string cut to 6,000
        characters. A later value of a name replaces the earlier."""


class Task(ABC):
    """Base class of every task definition."""

    name: ClassVar[str] = ""
    task_type: ClassVar[TaskType] = TaskType.BASE
    Input: ClassVar[type[TaskInput]] = TaskInput
    Output: ClassVar[type[TaskOutput]] = TaskOutput
    steps: ClassVar[tuple[str, ...]] = ()
    # a failed run is tried again as a new run this many times (0-20), after
    # retry_delay_seconds doubled at each attempt (runyard.runtime.retries); a submit's
    # retries and retry_delay_seconds win over these
    retries: ClassVar[int] = 0
    retry_delay_seconds: ClassVar[float] = 10.0
    # a submit whose cache key matches an earlier success of this task runs nothing and
    # answers that task (runyard.runtime.taskcache); cache_expiry_seconds bounds how long
    # ago it may have finished (None: unlimited); a submit's cache and
    # cache_expiry_seconds win over these
    cache: ClassVar[bool] = False
    cache_expiry_seconds: ClassVar[float | None] = None
    # what a run needs (runyard.resource_settings): Resources(gpus=1, memory_mb=8192) or the
    # same as a dict; the settings' task_resources entry and a submit's resources win
    # field by field over it
    resources: ClassVar[Resources | dict[str, Any] | None] = None

    @abstractmethod
    def run(self, inputs: Any, run: TaskRun) -> TaskOutput:
        """Do the work; raise to fail; return the output model."""


def describe(task_cls: type[Task], name: str, plugin: str | None) -> TaskDefinition:
    """The public definition of a task class; raises ``TypeError`` for a malformed class."""
    if not (inspect.isclass(task_cls) and issubclass(task_cls, Task)):
        raise TypeError(f"{task_cls!r} is not a runyard Task class")
    doc = inspect.getdoc(task_cls)
    if not doc or task_cls.__doc__ is None:
        raise TypeError(f"Task {name} has no class docstring to describe it")
    if not issubclass(task_cls.Input, TaskInput) or not issubclass(task_cls.Output, TaskOutput):
        raise TypeError(f"Task {name}: Input/Output must derive from TaskInput/TaskOutput")
    _check_retries(task_cls, name)
    _check_cache(task_cls, name)
    _check_resources(task_cls, name)
    return TaskDefinition(
        name=name,
        source="plugin" if plugin else "native",
        plugin=plugin,
        task_type=TaskType(task_cls.task_type).value,
        description=doc,
        input_schema=task_cls.Input.model_json_schema(),
        output_schema=task_cls.Output.model_json_schema(),
    )


def _check_retries(task_cls: type[Task], name: str) -> None:
    try:
        check_policy(task_cls.retries, task_cls.retry_delay_seconds)
    except InvalidInput as exc:
        raise TypeError(f"Task {name}: {exc}") from exc


def _check_cache(task_cls: type[Task], name: str) -> None:
    """``cache`` is a bool and ``cache_expiry_seconds`` seconds or None: anything else (a
    helper of the same name, say) fails the class rather than making it cached."""
    expiry = task_cls.cache_expiry_seconds
    if not isinstance(task_cls.cache, bool):
        raise TypeError(f"Task {name}: cache must be True or False, not {task_cls.cache!r}")
    number = isinstance(expiry, int | float) and not isinstance(expiry, bool)
    if expiry is not None and not (number and 0 <= expiry < float("inf")):
        raise TypeError(
            f"Task {name}: cache_expiry_seconds must be seconds (>= 0) or None, not {expiry!r}"
        )


def _check_resources(task_cls: type[Task], name: str) -> None:
    if task_cls.resources is None:
        return
    try:
        parse_resources(task_cls.resources, f"Task {name}: resources")
    except InvalidInput as exc:
        raise TypeError(str(exc)) from exc


def declared_resources(task_cls: type[Task]) -> Resources | None:
    """The class's ``resources`` as a model (``describe`` has checked them)."""
    value = task_cls.resources
    return None if value is None else parse_resources(value, "resources")


class TaskExit(Exception):
    """Raised by a task body to fail with a specific exit code (e.g. a command's own)."""

    def __init__(self, exit_code: int, message: str) -> None:
        self.exit_code = exit_code
        super().__init__(message)
