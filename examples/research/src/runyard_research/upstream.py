"""Reading upstream tasks through lineage: ``source_tasks`` names them, their records say
where their artifacts are, and every file read is checked against its recorded sha256.

A task never knows a path of another task: it asks for ``upstreams(run, inputs.source_tasks,
"research_etl")`` and gets the succeeded upstream tasks of that kind with their recorded
artifacts. Anything else fails the run with a clear :class:`UpstreamError`::

    (etl,) = upstreams(run, inputs.source_tasks, ETL, count=(1, 1))
    frame = pandas.read_parquet(io.BytesIO(etl.read("train")))
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runyard.errors import NoSuchFile, UnsafePath
from runyard.tasks.base import TaskRun
from runyard.workspace.identity import parse_source_tasks, parse_task_id
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskMetadata
from runyard.workspace.safefs import open_under

ETL = "research_etl"
TRAIN = "research_train"
BACKTEST = "research_backtest"
MAX_ARTIFACT_BYTES = 512 * 1024 * 1024


class UpstreamError(RuntimeError):
    """An upstream task is missing, not succeeded, of the wrong kind, or its files changed."""


@dataclass
class Upstream:
    """A succeeded upstream task: its id, registered name, inputs, outputs and folder."""

    task_id: str
    reg_name: str
    folder: Path
    metadata: TaskMetadata
    workspace: Workspace = field(repr=False)

    @property
    def inputs(self) -> dict[str, Any]:
        return self.metadata.input_params

    @property
    def outputs(self) -> dict[str, Any]:
        return self.metadata.output_params

    def read(self, artifact: str) -> bytes:
        """The bytes of recorded artifact ``artifact``, verified against its size and sha256."""
        record = self.outputs.get("artifacts", {}).get(artifact)
        if not isinstance(record, dict) or not isinstance(record.get("path"), str):
            raise UpstreamError(f"Upstream task {self.task_id} recorded no artifact {artifact!r}")
        data = _read_checked(self.folder, record["path"], self.task_id)
        if len(data) != record.get("size") or _sha256(data) != record.get("sha256"):
            raise UpstreamError(
                f"Artifact {artifact!r} of upstream task {self.task_id} no longer matches "
                "its recorded size and sha256; rerun the upstream task"
            )
        return data

    def parents(self, reg_name: str) -> list[Upstream]:
        """This task's own upstream tasks of kind ``reg_name`` (lineage, one level up)."""
        sources = str(self.inputs.get("source_tasks") or "")
        return _resolve(self.workspace, sources, reg_name, self.task_id)


def workspace_of(run: TaskRun) -> Workspace:
    """The workspace the run's task folder lives in (``<root>/<type>/<task id>``)."""
    known = getattr(run, "workspace", None)
    if isinstance(known, Workspace):
        return known
    root = Path(run.task_dir).parent.parent
    return Workspace(root, root)


def upstreams(
    run: TaskRun, source_tasks: str, reg_name: str, count: tuple[int, int] = (1, 1)
) -> list[Upstream]:
    """The upstream tasks of kind ``reg_name`` listed in ``source_tasks``, all succeeded.

    ``count`` bounds how many there must be; other kinds in the list are ignored.
    """
    found = _resolve(workspace_of(run), source_tasks, reg_name, run.task_id)
    low, high = count
    if not low <= len(found) <= high:
        wanted = f"exactly {low}" if low == high else f"{low} to {high}"
        raise UpstreamError(
            f"{run.task_id} needs {wanted} upstream {reg_name} task(s) in source_tasks, "
            f"got {len(found)} (source_tasks={source_tasks!r})"
        )
    return found


def _resolve(workspace: Workspace, source_tasks: str, reg_name: str, who: str) -> list[Upstream]:
    found = []
    for task_id in parse_source_tasks(source_tasks):
        if parse_task_id(task_id).task == reg_name:
            found.append(_succeeded(workspace, task_id, who))
    return found


def _succeeded(workspace: Workspace, task_id: str, who: str) -> Upstream:
    status = workspace.read_status(task_id)
    if status is None:
        raise UpstreamError(
            f"Upstream task {task_id} of {who} is missing (deleted, or never created); "
            "rerun it and submit this task again"
        )
    if status.state == "failed":
        raise UpstreamError(f"Upstream task {task_id} of {who} failed: {status.error}")
    if status.state != "succeeded":
        raise UpstreamError(
            f"Upstream task {task_id} of {who} is {status.state}, not succeeded; "
            "wait for it to succeed before submitting this task"
        )
    metadata = workspace.read_metadata(task_id)
    if metadata is None:
        raise UpstreamError(f"Upstream task {task_id} of {who} has no metadata.json")
    folder = workspace.task_dir(task_id)
    return Upstream(task_id, metadata.reg_name, folder, metadata, workspace)


def _read_checked(folder: Path, relative: str, task_id: str) -> bytes:
    try:
        opened = open_under(folder, relative, single_link=True)
    except (NoSuchFile, UnsafePath) as exc:
        raise UpstreamError(f"Artifact of upstream task {task_id} cannot be read: {exc}") from exc
    with opened:
        if opened.size > MAX_ARTIFACT_BYTES:
            raise UpstreamError(f"Artifact {relative} of {task_id} is larger than this task reads")
        return _read_all(opened.fd, opened.size)


def _read_all(fd: int, size: int) -> bytes:
    parts, at = [], 0
    while at <= size:
        chunk = os.pread(fd, 1 << 20, at)
        if not chunk:
            break
        parts.append(chunk)
        at += len(chunk)
    return b"".join(parts)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
