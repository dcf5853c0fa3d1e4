"""Reading and comparing tracked runs: the answers of ``GET /api/v1/tasks/{id}/metrics``
and ``GET /api/v1/compare``, made from a workspace's files.

The routes, the CLI without a server and a task comparing runs (the research example's
analysis) all answer through these functions, so each answer has one shape::

    runs = task_runs(workspace, "base#fit#ridge", workspace.read_status("base#fit#ridge"))
    metrics_answer("base#fit#ridge", runs, name="cv_r2", max_points=500)
    # {"task_id", "runs": [{"run_id", "current", "state", "metrics": {name: series}}]}
    compare_answer([runs[0], other_runs[0]])
    # {"items": [...], "params": [{"name", "values", "differs"}], "metrics": [...]}

A run's folder is untrusted (its task wrote it): its files are read only through
:mod:`runyard.tracking.reading`, which refuses links, caps sizes and skips bad lines.
Callers check who may see a task before they hand its status here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runyard.errors import InvalidInput, RunNotFound
from runyard.tracking.jsonequal import canonical
from runyard.tracking.points import check_metric_name
from runyard.tracking.reading import (
    MAX_METRICS_BYTES,
    metrics_bytes,
    read_params,
    read_points,
    run_params,
    series,
    summarise,
)
from runyard.workspace.history import kept_runs, run_dir
from runyard.workspace.identity import is_run_id
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskStatus

MAX_POINTS_RANGE = (2, 10_000)
COMPARE_RANGE = (2, 20)
# what one answer reads of all its runs' metrics.jsonl together: a task rerun many times
# with forged, full-size files cannot make one request hold every run's points at once
MAX_ANSWER_BYTES = MAX_METRICS_BYTES
_ABSENT = object()  # a param one item lacks: a value of its own when comparing


@dataclass(frozen=True, slots=True)
class TrackedRun:
    """One run of a task: its status and the folder of its records (None: none left)."""

    task_id: str
    status: TaskStatus
    folder: Path | None
    current: bool


def task_runs(
    workspace: Workspace, task_id: str, current: TaskStatus | None, run_id: str | None = None
) -> list[TrackedRun]:
    """The runs of ``task_id``, the current one (``current``, read by the caller) first,
    then the kept ones newest first; only run ``run_id`` when given
    (:class:`RunNotFound` when the task has no such run)."""
    if run_id is not None and not is_run_id(run_id):
        raise InvalidInput(f"run_id {run_id[:80]!r} is no run id: 1-64 letters, digits, - or _")
    runs = []
    if current is not None:
        runs.append(TrackedRun(task_id, current, workspace.task_dir(task_id), True))
        if run_id == current.run_id:
            return runs
    for status in kept_runs(workspace, task_id):
        if current is None or status.run_id != current.run_id:
            folder = run_dir(workspace, task_id, status.run_id)
            runs.append(TrackedRun(task_id, status, folder, False))
    if run_id is None:
        return runs
    chosen = [run for run in runs if run.status.run_id == run_id]
    if not chosen:
        raise RunNotFound(task_id, run_id)
    return chosen


def check_max_points(raw: str | None) -> int | None:
    """``max_points`` of a query: None, or a whole number in :data:`MAX_POINTS_RANGE`."""
    if raw is None or raw == "":
        return None
    low, high = MAX_POINTS_RANGE
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not low <= value <= high:
        raise InvalidInput(f"max_points must be a whole number from {low} to {high}, got {raw!r}")
    return value


def metrics_answer(
    task_id: str, runs: Sequence[TrackedRun], *, name: str | None = None,
    max_points: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """``{"task_id", "runs": [{"run_id", "current", "state", "metrics"}]}``: each run's
    series per metric (``{"steps", "values", "times"}`` in logged order, values as numbers
    or "NaN"/"Infinity"/"-Infinity"), only metric ``name``'s when given, each thinned to
    ``max_points`` (its first and last kept, and each stretch's lowest and highest).
    All runs together are read up to :data:`MAX_ANSWER_BYTES` of their files; a run cut
    short by that (or by its own file's cap) carries ``"truncated": true``."""
    if name is not None:
        check_metric_name(name)
    answer = []
    budget = MAX_ANSWER_BYTES
    for run in runs:
        folder = run.folder
        size = metrics_bytes(folder) if folder is not None else 0
        points = read_points(folder, name=name, max_bytes=budget) if folder and size else []
        entry: dict[str, Any] = {
            "run_id": run.status.run_id,
            "current": run.current,
            "state": run.status.state.value,
            "metrics": series(points, max_points),
        }
        if size > budget:  # its later points were not read
            entry["truncated"] = True
        budget = max(0, budget - size)
        answer.append(entry)
    return {"task_id": task_id, "runs": answer}


def split_ref(ref: str) -> tuple[str, str | None]:
    """``(task reference, run id or None)`` of ``<ref>`` or ``<ref>@<run_id>``."""
    task_ref, at, run_id = ref.rpartition("@")
    if not at:
        return ref, None
    if not task_ref or not is_run_id(run_id):
        raise InvalidInput(
            f"{ref[:120]!r} is no <task>@<run id>: name a task, then '@' and one of its run ids"
        )
    return task_ref, run_id


def check_compare_count(refs: Sequence[object]) -> None:
    low, high = COMPARE_RANGE
    if not low <= len(refs) <= high:
        raise InvalidInput(f"compare takes {low} to {high} ids (id=...&id=...), got {len(refs)}")


def run_summary(run: TrackedRun) -> dict[str, Any]:
    """``{"task_id", "run_id", "state", "params", "metrics"}`` of one run: its inputs
    updated with the params it logged, and a summary per metric. A finished run's
    summaries are its status's; a live one's are read from its points."""
    status, folder = run.status, run.folder
    logged = {**(status.params or {}), **(read_params(folder) if folder else {})}
    metrics: dict[str, Any] = dict(status.metrics or {})
    if folder is not None and not (status.terminal and status.metrics):
        metrics.update(summarise(read_points(folder)))
    return {
        "task_id": run.task_id,
        "run_id": status.run_id,
        "state": status.state.value,
        "params": run_params(status, logged),
        "metrics": metrics,
    }


def compare_answer(runs: Sequence[TrackedRun]) -> dict[str, Any]:
    """The runs side by side: ``items`` (:func:`run_summary` of each), ``params`` (one row
    per name, a value per item, null where it lacks one; those that differ first, then
    the rest, each by name) and ``metrics`` (one row per name, by name, a summary or null
    per item). A param differs when not every item has the same JSON value; an item
    lacking it counts as a value of its own. Any number of runs (the API takes 2-20:
    :func:`check_compare_count`)."""
    items = [run_summary(run) for run in runs]
    return {"items": items, "params": _param_rows(items), "metrics": _metric_rows(items)}


def _param_rows(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = sorted({name for item in items for name in item["params"]})
    rows = []
    for name in names:
        present = [item["params"].get(name, _ABSENT) for item in items]
        differs = len({"\0absent" if v is _ABSENT else canonical(v) for v in present}) > 1
        values = [None if v is _ABSENT else v for v in present]
        rows.append({"name": name, "values": values, "differs": differs})
    return sorted(rows, key=lambda row: not row["differs"])  # stable: by name within each


def _metric_rows(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = sorted({name for item in items for name in item["metrics"]})
    return [
        {"name": name, "values": [item["metrics"].get(name) for item in items]} for name in names
    ]
