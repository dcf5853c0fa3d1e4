"""What the records inside an archive must hold before any of it is restored.

:mod:`runyard.backup.members` makes sure no member is written outside the restore
folders; a crafted archive can still hold records that send a server somewhere else once
it runs on the restored workspace (a session id ``../../x`` becomes a folder outside the
workspace that is made group-writable and mounted into a sandbox). So ``verify`` and
``restore`` read the records as a server would and refuse the archive when one breaks a
rule::

    with RecordCheck(settings.allowed_mount_roots) as records:
        for member in ...:
            records.name(parts)                 # ids in the member's path
            take = records.open(parts)          # a record to read: feed it every chunk
            ...
            records.close(parts)
        records.finish(manifest)                # BackupError naming every problem

The rules:

- a task folder ``workspace/<type>/<type>#<task>#<name>/`` is named by a valid task id,
  and its ``status.json`` and ``metadata.json`` are valid records of that very task (its
  ``task_id``, a ``run_id`` that is one path component, a known state);
- a kept run ``workspace/.history/<type>/<task_id>/<run_id>/`` is named by valid ids, and
  each file of the kept runs' store ``workspace/.history/.blobs/<xx>/<sha256>`` by the
  sha256 of its content (:mod:`runyard.backup.blobcheck`);
- the agent backend's folders ``workspaces/<run-id>``, ``session-state/<session-id>``,
  ``snapshots/<session-id>/<run-id>`` are named by valid ids, its uploads by valid names;
- the agent store ``workspace/agent/state.db`` holds only valid ids and grants inside the
  allowed mount roots (:mod:`runyard.backup.agentstore`);
- the manifest's ``running_tasks`` are valid task ids.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from runyard.agents.ids import AGENT_ID_RULE, is_agent_id, is_stored_name
from runyard.backup.agentstore import STORE_NAME, store_problems
from runyard.backup.blobcheck import BlobCheck, blob_name_problem
from runyard.backup.errors import BackupError
from runyard.backup.manifest import WORKSPACE_PREFIX, Manifest
from runyard.wire import TaskState
from runyard.workspace.identity import TASK_TYPES, is_run_id, is_task_id
from runyard.workspace.layout import METADATA_FILE, STATUS_FILE
from runyard.workspace.records import metadata_from_dict, status_from_dict

MAX_RECORD_BYTES = 64 << 20  # far above any status runyard writes; bounds what is held
SHOWN = 10
RUN_ID_RULE = "a run id is 1-64 letters, digits, '_' or '-'"
AGENT_FOLDERS = ("workspaces", "session-state", "snapshots")
HIDDEN = "."  # temp and staging folders (.tmp-*, .staging-*, .partial-*) carry no record

Sink = Callable[[bytes], object]


class RecordCheck:
    """Collects every problem of an archive's records while its members stream by."""

    def __init__(self, allowed_mount_roots: Sequence[Path] = ()) -> None:
        self.roots = list(allowed_mount_roots)
        self.problems: list[str] = []
        self._scratch = tempfile.TemporaryDirectory(prefix="runyard-backup-check-")
        self._held: dict[tuple[str, ...], bytearray] = {}
        self._store: IO[bytes] | None = None
        self._store_path: Path | None = None
        self._blobs = BlobCheck()

    def __enter__(self) -> RecordCheck:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._store is not None:
            self._store.close()
        self._scratch.cleanup()

    def name(self, parts: tuple[str, ...]) -> None:
        """Check the ids in a member's path (``parts`` as :func:`members.safe_parts` split it)."""
        if parts[0] != WORKSPACE_PREFIX or len(parts) < 3:
            return
        problem = _path_problem(parts[1:])
        if problem is not None:
            self.problems.append(f"{'/'.join(parts)}: {problem}")

    def open(self, parts: tuple[str, ...]) -> Sink | None:
        """Where to feed the content of a file member this check reads; None: not read."""
        name = "/".join(parts)
        if name == STORE_NAME:
            self._store_path = Path(self._scratch.name) / "state.db"
            self._store = open(self._store_path, "wb")  # noqa: SIM115 (closed by close())
            return self._store.write
        blob = self._blobs.open(parts)
        if blob is not None:
            return blob
        if _task_record(parts) is not None:
            held = self._held[parts] = bytearray()
            return lambda chunk: held.extend(chunk) if len(held) <= MAX_RECORD_BYTES else None
        return None

    def close(self, parts: tuple[str, ...]) -> None:
        """The member ``parts`` was read whole: check what it held."""
        if "/".join(parts) == STORE_NAME and self._store is not None:
            self._store.close()
            self._store = None
            return
        blob = self._blobs.close(parts)
        if blob is not None:
            self.problems.append(f"{'/'.join(parts)}: {blob}")
        held = self._held.pop(parts, None)
        task = _task_record(parts)
        if held is None or task is None:
            return
        problem = _record_problem(parts[-1], bytes(held), task)
        if problem is not None:
            self.problems.append(f"{'/'.join(parts)}: {problem}")

    def finish(self, manifest: Manifest) -> None:
        """Raise :class:`BackupError` naming the problems found, once every member was read."""
        for task_id in manifest.running_tasks:
            if not is_task_id(task_id):
                self.problems.append(f"MANIFEST.json: running task {task_id!r} is not a task id")
        if self._store_path is not None:
            self.problems += store_problems(self._store_path, self.roots)
        if self.problems:
            shown = "; ".join(self.problems[:SHOWN])
            more = len(self.problems) - SHOWN
            raise BackupError(
                "the archive is not intact: it holds records a server must not use: "
                f"{shown}" + (f" (and {more} more)" if more > 0 else "")
            )


def _task_record(parts: tuple[str, ...]) -> str | None:
    """The task id of ``workspace/<type>/<task_id>/{status,metadata}.json``, else None."""
    if len(parts) != 4 or parts[3] not in (STATUS_FILE, METADATA_FILE):
        return None
    _, task_type, folder, _ = parts
    if task_type in TASK_TYPES and folder.startswith(f"{task_type}#") and is_task_id(folder):
        return folder
    return None


def _path_problem(parts: tuple[str, ...]) -> str | None:
    """What is wrong with the ids in a workspace path (without its ``workspace`` root)."""
    head = parts[0]
    if head in TASK_TYPES:
        return _task_folder_problem(head, parts[1])
    if head == ".history" and len(parts) >= 3 and parts[1] in TASK_TYPES:
        return _history_problem(parts[1], parts[2:])
    if head == ".history" and len(parts) >= 2:
        return blob_name_problem(parts[1:])
    if head == "agent" and len(parts) >= 3:
        return _agent_problem(parts[1], parts[2:])
    return None


def _task_folder_problem(task_type: str, folder: str) -> str | None:
    # the server reads only folders named "<type>#...": anything else there is left alone
    if folder.startswith(f"{task_type}#") and not is_task_id(folder):
        return f"the task folder {folder!r} is not named by a valid task id"
    return None


def _history_problem(task_type: str, parts: tuple[str, ...]) -> str | None:
    problem = _task_folder_problem(task_type, parts[0])
    run = parts[1] if len(parts) >= 2 and not parts[1].startswith(HIDDEN) else None
    if problem is None and run is not None and not is_run_id(run):
        problem = f"the kept run folder {run!r} is not a run id ({RUN_ID_RULE})"
    return problem


def _agent_problem(folder: str, parts: tuple[str, ...]) -> str | None:
    if folder == "uploads" and len(parts) == 1:
        name = parts[0]
        if not name.startswith(HIDDEN) and not is_stored_name(name):
            return f"the upload {name!r} is not named as runyard names uploads"
        return None
    if folder not in AGENT_FOLDERS:
        return None
    named = parts[:2] if folder == "snapshots" else parts[:1]
    for ident in named:
        if folder == "snapshots" and ident.startswith(".staging-"):
            ident = ident.removeprefix(".staging-")
        if not is_agent_id(ident):
            return f"the folder {ident!r} under agent/{folder} is not an id ({AGENT_ID_RULE})"
    return None


def _record_problem(name: str, raw: bytes, task_id: str) -> str | None:
    if len(raw) > MAX_RECORD_BYTES:
        return f"larger than {MAX_RECORD_BYTES} bytes, more than any record runyard writes"
    try:
        data = json.loads(raw)
    except ValueError as exc:
        return f"not JSON ({exc})"
    if not isinstance(data, dict):
        return "not a JSON object"
    if data.get("task_id") != task_id:
        return f"its task_id {data.get('task_id')!r} is not the id of its folder {task_id!r}"
    if name == STATUS_FILE:
        return _status_problem(data, task_id)
    if metadata_from_dict(data, task_id) is None:
        return "not a valid metadata record of its task"
    return None


def _status_problem(data: dict[str, Any], task_id: str) -> str | None:
    if not is_run_id(data.get("run_id")):
        return f"its run_id {data.get('run_id')!r} is not one path component ({RUN_ID_RULE})"
    states = {state.value for state in TaskState}
    if data.get("state") not in states:
        return f"its state {data.get('state')!r} is not one of {', '.join(sorted(states))}"
    if status_from_dict(data, task_id) is None:
        return "not a valid status record of its task (a field of the wrong type or shape)"
    return None
