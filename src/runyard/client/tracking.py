"""Tracked metrics and run comparison over ``/api/v1``, for both clients.

    client.metrics("ridge").runs[0].metrics["cv_r2"].values      # [0.61, 0.64, ...]
    client.metrics("ridge", name="loss", max_points=500)           # one metric, thinned
    table = client.compare(["ridge", "lasso", "ridge@<run id>"])
    [row.name for row in table.params if row.differs]             # ["alpha", "model"]

Values are numbers, or the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` for the
non-finite ones (JSON has no number for them); a summary's ``min``/``max`` is None when
every value is NaN.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from runyard.client.taskfiles import task_path
from runyard.wire import TaskState

COMPARE = "/api/v1/compare"
Value = float | str  # a number, or "NaN" / "Infinity" / "-Infinity"


class MetricSeries(BaseModel):
    """One metric's points of one run, in logged order."""

    model_config = ConfigDict(extra="allow")

    steps: list[int]
    values: list[Value]
    times: list[float]


class RunMetrics(BaseModel):
    """One run's metrics: ``current`` is the task's current run; the others were kept when
    a rerun replaced them."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    current: bool
    state: TaskState
    metrics: dict[str, MetricSeries]


class TaskMetrics(BaseModel):
    """``GET /api/v1/tasks/{id}/metrics``: the current run first, then kept runs newest first."""

    model_config = ConfigDict(extra="allow")

    task_id: str
    runs: list[RunMetrics]


class MetricSummary(BaseModel):
    """A metric of one run: its last value and step, its extremes (NaN ignored) and its
    number of points."""

    model_config = ConfigDict(extra="allow")

    last: Value | None = None
    min: Value | None = None
    max: Value | None = None
    step: int | None = None
    count: int | None = None


class ComparedRun(BaseModel):
    """One run compared: its params (inputs updated with logged params) and summaries."""

    model_config = ConfigDict(extra="allow")

    task_id: str
    run_id: str
    state: TaskState
    params: dict[str, Any]
    metrics: dict[str, MetricSummary]


class ParamRow(BaseModel):
    """A param across the compared runs: a value per run (None where one lacks it)."""

    name: str
    values: list[Any]
    differs: bool


class MetricRow(BaseModel):
    """A metric across the compared runs: a summary per run (None where one lacks it)."""

    name: str
    values: list[MetricSummary | None]


class Comparison(BaseModel):
    """``GET /api/v1/compare``: ``params`` differing first (then the same ones), each
    group by name; ``metrics`` by name."""

    model_config = ConfigDict(extra="allow")

    items: list[ComparedRun]
    params: list[ParamRow]
    metrics: list[MetricRow]


def metrics_path(task_id: str) -> str:
    return task_path(task_id, "metrics")


def metrics_query(run_id: str | None, name: str | None, max_points: int | None) -> dict[str, Any]:
    query = {"run_id": run_id, "name": name, "max_points": max_points}
    return {key: value for key, value in query.items() if value is not None}


def compare_query(ids: Iterable[str]) -> list[tuple[str, str]]:
    """``id=...`` once per reference; a lone string is refused, not split into letters."""
    if isinstance(ids, str):
        raise TypeError("compare takes a list of task ids, not one string")
    return [("id", ref) for ref in ids]


def filter_query(params: Mapping[str, object] | None) -> dict[str, list[str]]:
    """``filter=params.<name>=<value>`` of the task list, once per param: a string as it
    is, any other value as its JSON text (``{"alpha": 0.1}`` -> ``params.alpha=0.1``)."""
    if not params:
        return {}
    texts = [(n, v if isinstance(v, str) else json.dumps(v)) for n, v in params.items()]
    return {"filter": [f"params.{name}={text}" for name, text in texts]}


def metrics_answer(body: dict[str, Any]) -> TaskMetrics:
    return TaskMetrics.model_validate(body)


def compare_answer(body: dict[str, Any]) -> Comparison:
    return Comparison.model_validate(body)
