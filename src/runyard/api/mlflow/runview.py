"""A runyard run as MLflow's ``Run`` message: info, data (metrics, params, tags).

* status: queued ``SCHEDULED``, running ``RUNNING``, succeeded ``FINISHED``, failed
  ``FAILED``, cancelled ``KILLED``; times in epoch milliseconds.
* metrics: the last value of each (with its step and time), from the status's summary
  when it has one, else from ``metrics.jsonl``; non-finite values as MLflow's JSON writes
  them (``"NaN"``, ``"Infinity"``).
* params: the run's inputs updated with what it logged, each as text (a string as it is,
  any other value as its JSON text: ``0.1``, ``true``).
* tags: those MLflow's client set on a run it opened; for every run also
  ``mlflow.runName`` (the task name part of its id) and ``runyard.task_id``.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from runyard.api.mlflow.experiments import DEFAULT_ID, DEFAULT_TASK
from runyard.api.mlflow.lookup import RunRef
from runyard.tracking.points import Point, wire_value
from runyard.tracking.reading import read_params, read_points, run_params, summarise
from runyard.workspace.identity import parse_task_id
from runyard.workspace.records import TaskState, TaskStatus

STATUS_OF_STATE = {
    TaskState.QUEUED: "SCHEDULED",
    TaskState.RUNNING: "RUNNING",
    TaskState.SUCCEEDED: "FINISHED",
    TaskState.FAILED: "FAILED",
    TaskState.CANCELLED: "KILLED",
}
RUN_NAME_TAG = "mlflow.runName"
TASK_ID_TAG = "runyard.task_id"


def millis(stamp: str | None) -> int | None:
    """An ISO-8601 ``...Z`` time as epoch milliseconds (None stays None)."""
    if not stamp:
        return None
    try:
        parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int(parsed.replace(tzinfo=parsed.tzinfo or UTC).timestamp() * 1000)


def experiment_id_of(task_id: str) -> str:
    task = parse_task_id(task_id).task
    return DEFAULT_ID if task == DEFAULT_TASK else task


def run_name(status: TaskStatus) -> str:
    return status.task_id.rsplit("#", 1)[-1]


def tracked_tags(status: TaskStatus) -> dict[str, str]:
    tracked = status.tracked or {}
    tags = tracked.get("tags")
    return {str(k): str(v) for k, v in tags.items()} if isinstance(tags, dict) else {}


def run_info(ref: RunRef) -> dict[str, Any]:
    status = ref.status
    experiment_id = experiment_id_of(status.task_id)
    user = (status.tracked or {}).get("user_id")
    return {
        "run_id": status.run_id,
        "run_uuid": status.run_id,
        "run_name": run_name(status),
        "experiment_id": experiment_id,
        "user_id": user if isinstance(user, str) else "runyard",
        "status": STATUS_OF_STATE[status.state],
        "start_time": millis(status.started_at) or millis(status.created_at) or 0,
        "end_time": millis(status.finished_at),
        "artifact_uri": f"mlflow-artifacts:/{experiment_id}/{status.run_id}/artifacts",
        "lifecycle_stage": "active",
    }


def run_tags(status: TaskStatus) -> dict[str, str]:
    tags = tracked_tags(status)
    tags[RUN_NAME_TAG] = run_name(status)
    tags[TASK_ID_TAG] = status.task_id
    return tags


def param_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def run_param_texts(ref: RunRef) -> dict[str, str]:
    logged = ref.status.params if isinstance(getattr(ref.status, "params", None), dict) else None
    params = run_params(ref.status, logged if logged is not None else read_params(ref.folder))
    return {str(name): param_text(value) for name, value in params.items()}


def latest_metrics(ref: RunRef) -> list[dict[str, Any]]:
    """The last point of each metric, as MLflow's ``Metric`` messages."""
    summary = getattr(ref.status, "metrics", None)
    if isinstance(summary, dict) and summary:
        return [_latest(name, s) for name, s in sorted(summary.items()) if isinstance(s, dict)]
    lasts: dict[str, Point] = {}
    for point in read_points(ref.folder):
        lasts[point.name] = point
    return [metric_json(p) for _, p in sorted(lasts.items())]


def _latest(name: str, summary: dict[str, Any]) -> dict[str, Any]:
    time = summary.get("time")
    return {
        "key": name,
        "value": summary.get("last"),
        "timestamp": int(time * 1000) if isinstance(time, int | float) else 0,
        "step": summary.get("step", 0),
    }


def metric_json(point: Point) -> dict[str, Any]:
    return {
        "key": point.name,
        "value": wire_value(point.value),
        "timestamp": int(point.time * 1000) if math.isfinite(point.time) else 0,
        "step": point.step,
    }


def run_json(ref: RunRef) -> dict[str, Any]:
    """The whole ``Run`` message of ``ref``."""
    return {
        "info": run_info(ref),
        "data": {
            "metrics": latest_metrics(ref),
            "params": [{"key": k, "value": v} for k, v in sorted(run_param_texts(ref).items())],
            "tags": [{"key": k, "value": v} for k, v in sorted(run_tags(ref.status).items())],
        },
        "inputs": {},
        "outputs": {},
    }


def metric_summaries(ref: RunRef) -> dict[str, dict[str, Any]]:
    """Per metric ``{"last", "min", "max", "step", "count"}`` (for filters and ordering)."""
    summary = getattr(ref.status, "metrics", None)
    if isinstance(summary, dict) and summary:
        return {str(k): v for k, v in summary.items() if isinstance(v, dict)}
    return summarise(read_points(ref.folder))
