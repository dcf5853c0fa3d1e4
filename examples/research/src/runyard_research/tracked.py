"""Comparing tracked runs from inside a task: the answer ``GET /api/v1/compare`` gives,
made by the same function the route uses (:func:`runyard.tracking.views.compare_answer`)
from the workspace's files, so it works whether a server runs the pipeline or not::

    table = compare_tasks(run, ["train#research_train#a", "train#research_train#b"])
    [row["name"] for row in table["params"] if row["differs"]]    # ["alpha", "model", ...]
    studio_compare_route(ids)    # "/compare?ids=...": the Studio's compare view of them
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from runyard.tasks.base import TaskRun
from runyard.tracking.views import compare_answer, task_runs
from runyard_research.upstream import UpstreamError, workspace_of


def compare_tasks(run: TaskRun, task_ids: list[str]) -> dict[str, Any]:
    """The compare answer of the current runs of ``task_ids`` (``items``, ``params`` with
    the differing ones first, ``metrics``)."""
    workspace = workspace_of(run)
    runs = []
    for task_id in task_ids:
        status = workspace.read_status(task_id)
        if status is None:
            raise UpstreamError(f"Task {task_id} is missing: nothing to compare")
        runs += task_runs(workspace, task_id, status, status.run_id)
    return compare_answer(runs)


def last(item: dict[str, Any], metric: str) -> float | None:
    """The last value of ``metric`` in one compared run, None when it logged none (or a
    non-finite one)."""
    value = (item["metrics"].get(metric) or {}).get("last")
    return float(value) if isinstance(value, int | float) else None


def differing_params(table: dict[str, Any]) -> list[dict[str, Any]]:
    """The param rows whose values differ between the runs."""
    return [row for row in table["params"] if row["differs"]]


def studio_compare_route(task_ids: list[str]) -> str:
    """The Studio's route of its compare view of ``task_ids`` (append it to the server's
    address after ``/#``)."""
    return "/compare?ids=" + quote(",".join(task_ids), safe="")
