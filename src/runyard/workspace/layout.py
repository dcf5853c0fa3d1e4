"""Where things live in a workspace. Looking a task up is computing its path, never a scan.

>>> ws = Workspace(Path("/data/.runyard"), Path("/data/logs"))
>>> ws.task_dir("base#demo#api-demo")
PosixPath('/data/.runyard/base/base#demo#api-demo')
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from runyard.faults import fault_point
from runyard.workspace.atomic import read_json_tolerant, write_json_atomic
from runyard.workspace.identity import TASK_TYPES, TaskType, parse_task_id, validate_run_id
from runyard.workspace.records import (
    TaskMetadata,
    TaskStatus,
    metadata_from_dict,
    status_from_dict,
)

STATUS_FILE = "status.json"
METADATA_FILE = "metadata.json"
EVENTS_FILE = "events.jsonl"
WORKER_LOCK_FILE = ".worker.lock"
# beside the type folders, outside their watches (see :mod:`runyard.runtime.creation`)
STAGING_DIR = ".staging"
CLAIMS_FILE = ".claims"
RECORD_FILES = frozenset({STATUS_FILE, METADATA_FILE, EVENTS_FILE})
# The on-disk format of a workspace, written into backups; raised when a layout change
# needs an upgrade step, so a restore can tell an archive from a newer runyard.
WORKSPACE_FORMAT = 1


@functools.lru_cache(maxsize=4096)
def _task_dir(root: Path, task_id: str) -> Path:
    """The folder of ``task_id`` under ``root``, remembered for the tasks now in use (a
    path is built many times a task; paths are immutable)."""
    tid = parse_task_id(task_id)
    return root / tid.task_type / str(tid)


@dataclass(frozen=True)
class Workspace:
    """A workspace root and its separate log folder."""

    root: Path
    log_dir: Path

    @classmethod
    def open(cls, root: Path, log_dir: Path) -> Workspace:
        return cls(Path(os.path.abspath(root)), Path(os.path.abspath(log_dir)))

    def type_dir(self, task_type: str) -> Path:
        return self.root / task_type

    def task_dir(self, task_id: str) -> Path:
        if not isinstance(task_id, str):  # an unhashable one must fail as a bad id too
            parse_task_id(task_id)
        return _task_dir(self.root, task_id)

    def status_path(self, task_id: str) -> Path:
        return self.task_dir(task_id) / STATUS_FILE

    def metadata_path(self, task_id: str) -> Path:
        return self.task_dir(task_id) / METADATA_FILE

    def events_path(self, task_id: str) -> Path:
        return self.task_dir(task_id) / EVENTS_FILE

    def lock_path(self, task_id: str) -> Path:
        return self.task_dir(task_id) / WORKER_LOCK_FILE

    def claim_slot(self, task_id: str) -> tuple[Path, int]:
        """The lock file, and the byte in it, that serialise the creation and replacement
        of ``task_id`` (see :func:`runyard.runtime.creation.claim`): one file for every
        id, the byte chosen by the id's hash."""
        tid = parse_task_id(task_id)
        digest = hashlib.blake2b(str(tid).encode(), digest_size=8).digest()
        return self.root / CLAIMS_FILE, int.from_bytes(digest, "big") >> 2

    @property
    def staging_dir(self) -> Path:
        """Where new task folders are built before they are renamed into their type folder."""
        return self.root / STAGING_DIR

    def relative(self, path: Path) -> str:
        return os.path.relpath(path, self.root)

    def run_log_path(self, task_id: str, run_id: str) -> Path:
        """Where run ``run_id`` of ``task_id`` logs: derived from both ids, each checked as
        one path component, never taken from a record (``status.log_path`` is only told)."""
        tid = parse_task_id(task_id)
        validate_run_id(run_id)
        return self.log_dir / tid.task_type / str(tid) / f"{run_id}.log"

    def ensure(self) -> None:
        for task_type in TaskType:
            self.type_dir(task_type.value).mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)

    def read_status(self, task_id: str) -> TaskStatus | None:
        return status_from_dict(read_json_tolerant(self.status_path(task_id)), task_id)

    def read_metadata(self, task_id: str) -> TaskMetadata | None:
        return metadata_from_dict(read_json_tolerant(self.metadata_path(task_id)), task_id)

    def write_status(self, status: TaskStatus, *, durable: bool = False) -> None:
        fault_point("status.final" if status.terminal else "status")
        write_json_atomic(self.status_path(status.task_id), status.to_json(), sync_dir=durable)

    def write_metadata(self, metadata: TaskMetadata) -> None:
        fault_point("metadata")
        write_json_atomic(self.metadata_path(metadata.task_id), metadata.to_json(), sync_dir=True)

    def iter_task_dirs(self) -> Iterator[tuple[str, Path]]:
        """Every ``(task_id, folder)`` under the type folders (used once, to build an index)."""
        for task_type in sorted(TASK_TYPES):
            base = self.type_dir(task_type)
            try:
                entries = os.scandir(base)
            except OSError:
                continue
            with entries:
                for entry in entries:
                    if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                        continue
                    if entry.name.startswith(f"{task_type}#"):
                        yield entry.name, Path(entry.path)
