"""Finding runs for MLflow: by run id, and every run of an experiment's tasks.

An MLflow run id is a runyard run id (a uuid4 hex, as MLflow's are). A run MLflow's client
opened is found at once through ``<workspace>/.mlflow/runs/<run_id>`` (a file holding its
task id, written when the run is made); any other run (one runyard ran) by its task's
current status in the index, then among the kept earlier runs of the tasks with history.

A run's folder is the task folder for its current run and the kept entry
(``.history/<type>/<task id>/<run id>/``) for an earlier one; both are untrusted and read
only through :func:`runyard.workspace.safefs.open_under`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from runyard.api.mlflow.errors import NOT_FOUND, MlflowRefusal
from runyard.api.mlflow.experiments import MLFLOW_DIR
from runyard.api.services import Services
from runyard.repository.records import status_json
from runyard.workspace.atomic import read_bytes_tolerant, write_bytes_atomic
from runyard.workspace.history import history_task_ids, kept_runs, task_history_dir
from runyard.workspace.identity import is_run_id, is_task_id, parse_task_id
from runyard.workspace.records import TaskStatus

RUNS_DIR = "runs"
MAX_TASK_ID_BYTES = 512


@dataclass(frozen=True)
class RunRef:
    """One run of one task: its status, the folder of its records, and whether it is the
    task's current run."""

    status: TaskStatus
    folder: Path
    current: bool

    @property
    def task_id(self) -> str:
        return self.status.task_id

    @property
    def run_id(self) -> str:
        return self.status.run_id


def remember_run(services: Services, run_id: str, task_id: str) -> None:
    """Note which task run ``run_id`` (opened through MLflow) belongs to."""
    folder = services.workspace.root / MLFLOW_DIR / RUNS_DIR
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_bytes_atomic(folder / run_id, task_id.encode())


def find_run(services: Services, run_id: object) -> RunRef:
    """The run ``run_id``; RESOURCE_DOES_NOT_EXIST when there is none."""
    if not isinstance(run_id, str) or not is_run_id(run_id):
        raise MlflowRefusal(NOT_FOUND, f"Run {str(run_id)[:80]!r} not found")
    found = _remembered(services, run_id) or _current(services, run_id) or _kept(services, run_id)
    if found is None:
        raise MlflowRefusal(NOT_FOUND, f"Run {run_id!r} not found")
    return found


def _remembered(services: Services, run_id: str) -> RunRef | None:
    path = services.workspace.root / MLFLOW_DIR / RUNS_DIR / run_id
    raw = read_bytes_tolerant(path, limit=MAX_TASK_ID_BYTES)
    task_id = raw.decode("utf-8", "replace") if raw is not None else ""
    return run_of_task(services, task_id, run_id) if is_task_id(task_id) else None


def _current(services: Services, run_id: str) -> RunRef | None:
    needle = run_id.encode()
    for task_id, record in services.repository.list_entries():
        raw = status_json(record)
        if raw is None or needle in raw:
            found = run_of_task(services, task_id, run_id)
            if found is not None:
                return found
    return None


def _kept(services: Services, run_id: str) -> RunRef | None:
    for task_id in history_task_ids(services.workspace):
        entry = task_history_dir(services.workspace, task_id) / run_id
        if os.path.isdir(entry) and not os.path.islink(entry):
            found = run_of_task(services, task_id, run_id)
            if found is not None:
                return found
    return None


def run_of_task(services: Services, task_id: str, run_id: str) -> RunRef | None:
    """Run ``run_id`` of ``task_id``, current or kept; None when the task has no such run."""
    current = services.repository.get(task_id)
    if current is not None and current.run_id == run_id:
        return RunRef(current, services.workspace.task_dir(task_id), True)
    for status in kept_runs(services.workspace, task_id):
        if status.run_id == run_id:
            return RunRef(status, task_history_dir(services.workspace, task_id) / run_id, False)
    return None


def runs_of_tasks(services: Services, tasks: set[str]) -> list[RunRef]:
    """Every run (current and kept) of every task whose name is in ``tasks``."""
    task_ids = {t for t in services.repository.list_ids() if _name(t) in tasks}
    task_ids |= {t for t in history_task_ids(services.workspace) if _name(t) in tasks}
    found: list[RunRef] = []
    for task_id in sorted(task_ids):
        current = services.repository.get(task_id)
        if current is not None:
            found.append(RunRef(current, services.workspace.task_dir(task_id), True))
        history = task_history_dir(services.workspace, task_id)
        for status in kept_runs(services.workspace, task_id):
            if current is None or status.run_id != current.run_id:
                found.append(RunRef(status, history / status.run_id, False))
    return found


def _name(task_id: str) -> str:
    try:
        return parse_task_id(task_id).task
    except ValueError:
        return ""
