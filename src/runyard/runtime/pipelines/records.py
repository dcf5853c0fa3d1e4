"""The durable record of a pipeline run, beside the workspace's type folders.

    <workspace>/.pipelines/<run id>.json
        {"id": "research-20261207-193501-a1b2c3", "pipeline": "research",
         "params": {...}, "created_at": "...Z", "submitted_by": "admin" | {session_id, run_id},
         "steps": [{"key": "etl", "task": "research_etl", "task_id": "etl#research_etl#a1b2c3-etl",
                    "depends_on": []}, ...]}

Written once, atomically (temp file, fsync, rename, folder fsync), after every step's task
exists; the steps' states are never kept here: they are read from the tasks. A run id is one
path component (:data:`RUN_ID_RE`), checked before any path is made from it.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runyard.errors import PipelineRunNotFound
from runyard.runtime.submitters import ADMIN, Submitter
from runyard.workspace.atomic import read_json_tolerant, write_json_atomic
from runyard.workspace.layout import Workspace

PIPELINES_DIR = ".pipelines"
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}-\d{8}-\d{6}-[0-9a-f]{6}$")
RECORD_LIMIT = 4 << 20  # bytes: 200 steps with large inputs fit many times over


@dataclass
class StepRecord:
    key: str
    task: str
    task_id: str
    depends_on: list[str] = field(default_factory=list)


@dataclass
class PipelineRun:
    id: str
    pipeline: str
    params: dict[str, Any]
    created_at: str
    steps: list[StepRecord]
    submitted_by: Submitter = ADMIN

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PipelineRun:
        steps = [StepRecord(**step) for step in data["steps"]]
        return cls(**{**data, "steps": steps})

    def session(self) -> str | None:
        by = self.submitted_by
        return by.get("session_id") if isinstance(by, dict) else None


def new_run_id(pipeline: str) -> str:
    """A fresh run id; its random suffix also names the steps' tasks."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return f"{pipeline}-{stamp}-{secrets.token_hex(3)}"


def runs_dir(workspace: Workspace) -> Path:
    return workspace.root / PIPELINES_DIR


def run_path(workspace: Workspace, run_id: str) -> Path:
    if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id):
        raise PipelineRunNotFound(str(run_id))
    return runs_dir(workspace) / f"{run_id}.json"


def write_run(workspace: Workspace, run: PipelineRun) -> None:
    folder = runs_dir(workspace)
    folder.mkdir(mode=0o700, exist_ok=True)
    write_json_atomic(run_path(workspace, run.id), run.to_json(), sync_dir=True, mode=0o600)


def read_run(workspace: Workspace, run_id: str) -> PipelineRun:
    """The record of ``run_id``; :class:`PipelineRunNotFound` when there is none (or it is
    unreadable: a link, not JSON, not of this id)."""
    try:
        data = read_json_tolerant(run_path(workspace, run_id))
        run = PipelineRun.from_json(data) if isinstance(data, dict) else None
    except (ValueError, TypeError, KeyError):
        run = None
    if run is None or run.id != run_id:
        raise PipelineRunNotFound(run_id)
    return run


def list_runs(workspace: Workspace) -> list[PipelineRun]:
    """Every readable run, newest first."""
    try:
        names = os.listdir(runs_dir(workspace))
    except FileNotFoundError:
        return []
    runs = []
    for name in names:
        run_id = name.removesuffix(".json")
        if name.endswith(".json") and RUN_ID_RE.fullmatch(run_id):
            try:
                runs.append(read_run(workspace, run_id))
            except PipelineRunNotFound:
                continue
    return sorted(runs, key=lambda run: (run.created_at, run.id), reverse=True)
