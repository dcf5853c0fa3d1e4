"""Record writers shared by the repository tests: real files in a real workspace."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from runyard.workspace import TaskMetadata, TaskStatus, Workspace
from runyard.workspace.atomic import write_json_atomic

BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> str:
    """A created_at ``seconds`` after the base time, with a ``Z``."""
    return (BASE_TIME + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def make_workspace(tmp_path: Path) -> Workspace:
    ws = Workspace.open(tmp_path / "ws", tmp_path / "logs")
    ws.ensure()
    return ws


def put_status(
    ws: Workspace,
    task_id: str,
    state: str = "succeeded",
    created: float = 0,
    sources: str = "",
    **fields: object,
) -> TaskStatus:
    task_type, task, name = task_id.split("#")
    status = TaskStatus.model_validate(
        {
            "task_id": task_id,
            "run_id": "r" + name,
            "task_type": task_type,
            "task_name": task,
            "state": state,
            "config": {"task_name": name, "source_tasks": sources},
            "created_at": at(created),
            **fields,
        }
    )
    ws.task_dir(task_id).mkdir(parents=True, exist_ok=True)
    write_json_atomic(ws.status_path(task_id), status.to_json(), fsync=False)
    return status


def put_metadata(
    ws: Workspace, task_id: str, created: float = 0, sources: str = ""
) -> TaskMetadata:
    task_type, task, name = task_id.split("#")
    meta = TaskMetadata(
        task_id=task_id,
        reg_name=task,
        created_at=at(created),
        task_type=task_type,
        input_params={"task_name": name, "source_tasks": sources},
        output_params={"value": 3},
    )
    ws.task_dir(task_id).mkdir(parents=True, exist_ok=True)
    write_json_atomic(ws.metadata_path(task_id), meta.to_json(), fsync=False)
    return meta


def wait_for(condition: Callable[[], object], timeout: float = 5.0) -> None:
    """Return once ``condition()`` is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.002)


class Recorder:
    """Collects ``(task_id, file_name)`` callbacks from the watcher thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def __call__(self, task_id: str, name: str) -> None:
        with self._lock:
            self.calls.append((task_id, name))

    def seen(self, task_id: str, name: str) -> bool:
        with self._lock:
            return (task_id, name) in self.calls

    def clear(self) -> None:
        with self._lock:
            self.calls.clear()
