"""One run of a task as the API shows it, current or kept: ``GET /api/v1/tasks/{id}/runs/
{run_id}`` and its files (``.../runs/{run_id}/files/{path}``).

Answer of a run::

    {"task_id", "run_id", "current": bool, "state", "created_at", "started_at",
     "finished_at", "exit_code", "error", "attempt"?, "config", "result",
     "params": {...}, "metrics": {name: {"last", "min", "max", "step", "count"}},
     "files": [{"path", "size", "sha256"}]}

``params`` are the run's inputs updated with what it logged, ``metrics`` the summary of its
``metrics.jsonl`` (:mod:`runyard.tracking.reading`). A run token sees only its session's
tasks: another's answers 404 as a missing task does; an unknown run answers 404
``run_not_found``. Every file is read as :mod:`runyard.workspace.runfiles` reads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runyard.agents.models import RunScope
from runyard.api.jobs import current_status
from runyard.api.services import Services
from runyard.errors import NoSuchFile, RunNotFound
from runyard.tracking.reading import read_params, read_points, run_params, summarise
from runyard.wire import TaskStatus
from runyard.workspace.filenames import name_from_shown
from runyard.workspace.history import RUN_FIELDS, run_dir, run_status
from runyard.workspace.runfiles import list_run_files, open_run_file
from runyard.workspace.safefs import OpenedFile


def tracking_of(status: TaskStatus, folder: Path | None) -> dict[str, Any]:
    """``{"params", "metrics"}`` of a run: from its status when the worker summarised them
    there, else read from its folder (nothing of either when there is no folder)."""
    logged = getattr(status, "params", None)
    metrics = getattr(status, "metrics", None)
    if folder is not None:
        if logged is None:
            logged = read_params(folder)
        if metrics is None:
            metrics = summarise(read_points(folder))
    metrics = {k: _plain(v) for k, v in (metrics or {}).items()}
    return {"params": run_params(status, logged or {}), "metrics": metrics}


def _plain(summary: Any) -> Any:
    return summary.model_dump(mode="json") if hasattr(summary, "model_dump") else summary


def run_answer(services: Services, task_id: str, run_id: str, scope: RunScope | None) -> dict:
    """The answer for one run; TaskNotFound / RunNotFound as the module says."""
    current = current_status(services, task_id, scope)
    status, folder = _run(services, task_id, run_id, current)
    data = status.model_dump(mode="json", include=set(RUN_FIELDS) | {"config", "result"})
    answer: dict[str, Any] = {"task_id": task_id, **data, "current": status.run_id ==
                              current.run_id}  # fmt: skip
    if status.attempt is not None:
        answer["attempt"] = status.attempt
    answer.update(tracking_of(status, folder))
    answer["files"] = list_run_files(services.workspace, task_id, run_id)
    return answer


def _run(
    services: Services, task_id: str, run_id: str, current: TaskStatus
) -> tuple[TaskStatus, Path]:
    if run_id == current.run_id:
        return current, services.workspace.task_dir(task_id)
    status = run_status(services.workspace, task_id, run_id)
    folder = run_dir(services.workspace, task_id, run_id)
    if status is None or folder is None:
        raise RunNotFound(task_id, run_id)
    return status, folder


def open_run_path(
    services: Services, task_id: str, run_id: str, path: str, scope: RunScope | None
) -> OpenedFile:
    """The file ``path`` (a shown name, as listed) of run ``run_id``, opened race-free."""
    current = current_status(services, task_id, scope)
    _run(services, task_id, run_id, current)  # RunNotFound before any file is looked at
    name = name_from_shown(path)
    try:
        return open_run_file(services.workspace, task_id, run_id, name)
    except NoSuchFile as exc:
        raise NoSuchFile(path, f"{exc.reason} in run {run_id} of {task_id}") from exc
