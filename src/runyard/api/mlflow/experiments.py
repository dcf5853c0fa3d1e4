"""MLflow experiments as runyard task names.

An experiment is a task name, the middle part of a task id (``train#fit_model#ridge``
belongs to experiment ``fit_model``): every run of every task of that name is one of its
runs. Three kinds exist:

* MLflow's ``Default`` experiment, id ``"0"``, whose runs are tasks named
  :data:`DEFAULT_TASK` (``base#mlflow-default#<run name>``);
* runyard's own task classes and every task name the workspace holds, each an experiment
  whose id is its name;
* tracked-only experiments made by ``mlflow.set_experiment`` / ``create_experiment``,
  kept as ``<workspace>/.mlflow/experiments/<name>.json`` (its creation time and tags);
  their runs are ``base#<name>#<run name>`` tasks that MLflow's client records.

A name must be a runyard task name (``[A-Za-z0-9_-]{1,64}``), so that it is one path
component and one part of a task id.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runyard.api.mlflow.errors import EXISTS, INVALID, NOT_FOUND, MlflowRefusal
from runyard.api.services import Services
from runyard.workspace.atomic import dump_json, read_json_tolerant, write_bytes_atomic
from runyard.workspace.identity import REG_NAME_RE, parse_task_id

MLFLOW_DIR = ".mlflow"
EXPERIMENTS_DIR = "experiments"
DEFAULT_ID = "0"
DEFAULT_NAME = "Default"
DEFAULT_TASK = "mlflow-default"
MAX_TAGS = 100


@dataclass
class Experiment:
    """One experiment as MLflow sees it; ``task`` is the task name of its runs."""

    experiment_id: str
    name: str
    task: str
    creation_time: int = 0
    tags: dict[str, str] = field(default_factory=dict)
    tracked_only: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "experiment_id": self.experiment_id,
            "name": self.name,
            "artifact_location": f"mlflow-artifacts:/{self.experiment_id}",
            "lifecycle_stage": "active",
            "creation_time": self.creation_time,
            "last_update_time": self.creation_time,
            "tags": [{"key": k, "value": v} for k, v in sorted(self.tags.items())],
        }


def experiments_dir(services: Services) -> Path:
    return services.workspace.root / MLFLOW_DIR / EXPERIMENTS_DIR


def task_of_name(name: object) -> str:
    """The task name of experiment ``name``; INVALID_PARAMETER_VALUE when it can be none."""
    if name == DEFAULT_NAME:
        return DEFAULT_TASK
    if not isinstance(name, str) or not REG_NAME_RE.fullmatch(name):
        shown = name[:80] if isinstance(name, str) else name
        raise MlflowRefusal(
            INVALID,
            f"Invalid experiment name {shown!r}: runyard keeps an experiment as a task name, "
            "1-64 letters, digits, '_' or '-'",
        )
    return name


def task_of_id(experiment_id: object) -> str:
    """The task name of ``experiment_id`` (the id is the name; ``"0"`` is Default)."""
    if experiment_id == DEFAULT_ID:
        return DEFAULT_TASK
    if not isinstance(experiment_id, str) or not REG_NAME_RE.fullmatch(experiment_id):
        raise MlflowRefusal(NOT_FOUND, f"No experiment with id {str(experiment_id)[:80]!r}")
    return experiment_id


def experiment_for_task(services: Services, task: str) -> Experiment:
    if task == DEFAULT_TASK:
        return Experiment(DEFAULT_ID, DEFAULT_NAME, DEFAULT_TASK)
    record = _record(services, task)
    if record is None:
        return Experiment(task, task, task)
    tags = record.get("tags")
    created = record.get("creation_time")
    return Experiment(
        task, task, task, creation_time=created if isinstance(created, int) else 0,
        tags=tags if isinstance(tags, dict) else {}, tracked_only=True,
    )  # fmt: skip


def _record(services: Services, task: str) -> dict[str, Any] | None:
    try:
        return read_json_tolerant(experiments_dir(services) / f"{task}.json")
    except ValueError:
        return None


def task_names_in_use(services: Services) -> set[str]:
    """The task names of the workspace's tasks and of runyard's task classes."""
    names = set(services.registry.names())
    for task_id in services.repository.list_ids():
        try:
            names.add(parse_task_id(task_id).task)
        except ValueError:
            continue
    return names


def exists(services: Services, task: str) -> bool:
    if task == DEFAULT_TASK or task in services.registry.names():
        return True
    if (experiments_dir(services) / f"{task}.json").is_file():
        return True
    return any(_named(task_id, task) for task_id in services.repository.list_ids())


def _named(task_id: str, task: str) -> bool:
    return task_id.split("#", 2)[1:2] == [task]


def get_by_name(services: Services, name: object) -> Experiment:
    task = task_of_name(name)
    if not exists(services, task):
        raise MlflowRefusal(NOT_FOUND, f"No experiment named {name!r}")
    return experiment_for_task(services, task)


def get_by_id(services: Services, experiment_id: object) -> Experiment:
    task = task_of_id(experiment_id)
    if not exists(services, task):
        raise MlflowRefusal(NOT_FOUND, f"No experiment with id {experiment_id!r}")
    return experiment_for_task(services, task)


def create(services: Services, name: object, tags: dict[str, str]) -> Experiment:
    """A tracked-only experiment named ``name``; RESOURCE_ALREADY_EXISTS if it exists."""
    task = task_of_name(name)
    if exists(services, task):
        raise MlflowRefusal(EXISTS, f"Experiment {name!r} already exists")
    folder = experiments_dir(services)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    record = {"name": task, "creation_time": int(time.time() * 1000), "tags": tags}
    write_bytes_atomic(folder / f"{task}.json", dump_json(record), sync_dir=True)
    return experiment_for_task(services, task)


def set_tag(services: Services, experiment: Experiment, key: str, value: str) -> None:
    """Keep an experiment tag; only a tracked-only experiment has a record to keep it in."""
    if not experiment.tracked_only:
        raise MlflowRefusal(
            INVALID, f"Experiment {experiment.name!r} is runyard's; only experiments made "
            "through MLflow keep tags",
        )  # fmt: skip
    tags = dict(experiment.tags)
    tags[key] = value
    if len(tags) > MAX_TAGS:
        raise MlflowRefusal(INVALID, f"An experiment keeps at most {MAX_TAGS} tags")
    path = experiments_dir(services) / f"{experiment.task}.json"
    record = {"name": experiment.task, "creation_time": experiment.creation_time, "tags": tags}
    write_bytes_atomic(path, dump_json(record))


def all_experiments(services: Services) -> list[Experiment]:
    """Every experiment, Default first, then by name."""
    names = task_names_in_use(services) | {DEFAULT_TASK}
    folder = experiments_dir(services)
    try:
        recorded = [n[: -len(".json")] for n in os.listdir(folder) if n.endswith(".json")]
    except OSError:
        recorded = []
    names |= {n for n in recorded if REG_NAME_RE.fullmatch(n)}
    ordered = sorted(names, key=lambda n: (n != DEFAULT_TASK, n))
    return [experiment_for_task(services, n) for n in ordered]
