"""AxonX 0.2.2's display replicas, as its sync sender archives them, turned into runyard
task folders for :func:`runyard.sync.receiver.apply_task_stream`.

An AxonX archive (``axonx.task.sync.archive.build_archive``) holds, for each task,
``<type>/<task id>/metadata.json`` (AxonX's ``TaskMetadata``: the task's status fields,
``input_params``, ``output_params`` and a ``replica`` manifest) beside the files it
lists, paths as in the task folder, its log at ``replica.log.path``
(``display/log.log``). A task whose members include that top-level ``metadata.json`` is
an AxonX replica (runyard's own archives carry ``task/<path>`` and ``log`` only).

:class:`ReplicaTask` renames each member into runyard's one-task tar (``task/<path>``,
the log member ``log``), hashing its body on the way, and keeps the metadata back; at the
task's end it checks what AxonX's applier checks (terminal, this task's record, the
manifest exactly the files that arrived with their sizes, the log range, no live
snapshot), then writes runyard's records: ``status.json`` (the status fields, ``config``
from ``input_params``, ``result`` from ``output_params``, AxonX's steps, and the manifest
as ``axonx_replica``, which ``task_sync_index`` answers back so the sender sees the task
as held) and, for a succeeded task, ``metadata.json``. AxonX records an artifact's size,
not its hash: an artifact that arrived whole gets the sha256 of the bytes received; one
the replica sampled is recorded as received with ``display: "sampled"`` and its
``source_size``; one it omitted moves to ``output_params.omitted_artifacts`` with the
reason. The receiver's own checks then run on the result as on any pushed task.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from typing import IO, Any

from pydantic_core import from_json

from runyard.errors import UnsafePath
from runyard.sync.errors import SyncRefused
from runyard.sync.members import LOG_MEMBER, TASK_PREFIX, check_parts
from runyard.workspace.identity import is_run_id, parse_task_id
from runyard.workspace.layout import METADATA_FILE, STATUS_FILE
from runyard.workspace.records import TERMINAL_STATES, utcnow

ORIGIN = {"server": "sync_tasks", "peer": "axonx"}
MAX_RECORD_BYTES = 32 << 20  # as the receiver's status.json and metadata.json
RUNYARD_RECORDS = frozenset({STATUS_FILE})  # names a replica may not carry: runyard writes them
STATUS_FIELDS = ("started_at", "finished_at", "error", "exit_code")


def is_replica_record(relative: str) -> bool:
    """Whether a member (its path in the task folder) marks the task as an AxonX replica."""
    return relative == METADATA_FILE


def read_record(task_id: str, body: IO[bytes] | None, size: int) -> dict[str, Any]:
    """AxonX's ``metadata.json`` as a JSON object, read within bounds."""
    if body is None or size > MAX_RECORD_BYTES:
        raise _refused(task_id, f"its metadata.json is not a file of at most {MAX_RECORD_BYTES}")
    try:
        data = from_json(body.read(MAX_RECORD_BYTES + 1), allow_inf_nan=False)
    except ValueError as exc:
        raise _refused(task_id, f"its metadata.json is not JSON runyard reads: {exc}") from exc
    if not isinstance(data, dict):
        raise _refused(task_id, "its metadata.json is not a JSON object")
    return data


def log_path_of(record: dict[str, Any]) -> str | None:
    """The member a replica names as its log (``replica.log.path``), if any."""
    replica = record.get("replica")
    log = replica.get("log") if isinstance(replica, dict) else None
    path = log.get("path") if isinstance(log, dict) else None
    return path if isinstance(path, str) else None


class _Hashing(io.RawIOBase):
    """A body read through, its bytes hashed and counted."""

    def __init__(self, body: IO[bytes], digest: Any) -> None:
        self.body, self.digest = body, digest

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        chunk = self.body.read(size)
        self.digest.update(chunk)
        return chunk


@dataclass
class ReplicaTask:
    """One AxonX task's members on their way into runyard's one-task tar (module docstring);
    ``log_path`` comes from a first reading of its metadata (:func:`log_path_of`)."""

    task_id: str
    log_path: str | None
    record: dict[str, Any] | None = None
    received: dict[str, tuple[int, Any]] = field(default_factory=dict)  # path: (size, digest)

    def add(self, writer: tarfile.TarFile, member: tarfile.TarInfo, body: IO[bytes] | None) -> None:
        """Write ``member`` (named as in the task folder) into ``writer``, renamed; the
        metadata is kept back for :meth:`finish`."""
        relative = member.name
        if is_replica_record(relative) and member.isfile():
            self.record = read_record(self.task_id, body, member.size)
            return
        if relative in RUNYARD_RECORDS:
            raise _refused(self.task_id, f"{relative} is runyard's own record, not a replica file")
        try:
            check_parts(relative)  # before a rename to ``log`` could hide a ``..``
        except UnsafePath as exc:
            raise SyncRefused(self.task_id, "bad_member", f"member {exc}") from exc
        if not member.isfile() or body is None:
            member.name = TASK_PREFIX + relative  # the receiver refuses links and devices
            writer.addfile(member, None)
            return
        digest = hashlib.sha256()
        member.name = LOG_MEMBER if relative == self.log_path else TASK_PREFIX + relative
        writer.addfile(member, _Hashing(body, digest))
        self.received[relative] = (member.size, digest)

    def finish(self, writer: tarfile.TarFile) -> None:
        """Check the replica against what arrived and add runyard's records to ``writer``."""
        record = self.record
        if record is None:
            raise _refused(self.task_id, "it has no metadata.json")
        replica = self._check_record(record)
        manifest = replica["files"]
        self._check_manifest(manifest, replica.get("log"))
        output = self._output(record.get("output_params"), manifest, replica.get("omitted"))
        _add_json(writer, TASK_PREFIX + STATUS_FILE, self._status(record, replica, output))
        if record["state"] == "succeeded":
            _add_json(writer, TASK_PREFIX + METADATA_FILE, self._metadata(record, output))

    def _check_record(self, record: dict[str, Any]) -> dict[str, Any]:
        task_type = parse_task_id(self.task_id).task_type
        if record.get("task_id") != self.task_id or record.get("task_type") != task_type:
            raise _refused(self.task_id, "its metadata.json is another task's")
        if not is_run_id(record.get("run_id")):
            raise _refused(
                self.task_id, "its run_id is not one runyard takes (1-64 of [A-Za-z0-9_-])"
            )
        if record.get("state") not in TERMINAL_STATES:
            raise _refused(self.task_id, "it is not finished (only finished tasks are received)")
        replica = record.get("replica")
        if not isinstance(replica, dict) or replica.get("purpose", "display") != "display":
            raise _refused(self.task_id, "its metadata.json has no display replica manifest")
        if replica.get("snapshot") is not None:
            raise _refused(self.task_id, "a live snapshot; runyard receives finished tasks only")
        if not isinstance(replica.get("files"), dict):
            raise _refused(self.task_id, "its replica manifest has no files")
        return replica

    def _check_manifest(self, manifest: dict[str, Any], log: Any) -> None:
        """What AxonX's ``verify_replica`` checks: the files are the manifest's, sizes too."""
        if set(manifest) != set(self.received):
            extra = sorted(set(self.received) - set(manifest))[:5]
            missing = sorted(set(manifest) - set(self.received))[:5]
            raise _refused(
                self.task_id,
                f"its files differ from its manifest (extra {extra}, missing {missing})",
            )
        for name, entry in manifest.items():
            size = entry.get("size") if isinstance(entry, dict) else None
            if size != self.received[name][0]:
                raise _refused(
                    self.task_id,
                    f"{name}: {self.received[name][0]} bytes, the manifest says {size}",
                )
        if log is not None:
            if not isinstance(log, dict):
                raise _refused(self.task_id, "its replica log is not an object")
            entry, start, end = manifest.get(str(log.get("path"))), log.get("start"), log.get("end")
            if not (isinstance(entry, dict) and isinstance(start, int) and isinstance(end, int)):
                raise _refused(self.task_id, "its replica log names no file of the manifest")
            if end - start != entry.get("size"):
                raise _refused(self.task_id, "its replica log range differs from its file")

    def _output(self, output: Any, manifest: dict[str, Any], omitted: Any) -> dict[str, Any]:
        if not isinstance(output, dict):
            return {}
        artifacts = output.get("artifacts")
        if not isinstance(artifacts, dict):
            return dict(output)
        kept: dict[str, Any] = {}
        left: dict[str, Any] = {}
        reasons = omitted if isinstance(omitted, dict) else {}
        for name, entry in artifacts.items():
            path = entry.get("path") if isinstance(entry, dict) else None
            if not isinstance(path, str) or path not in self.received:
                if isinstance(path, str) and path in reasons:
                    left[name] = {**entry, "reason": reasons[path]}
                    continue
                kept[name] = entry  # the receiver names what is wrong with it
                continue
            kept[name] = self._artifact(entry, manifest[path], path)
        mapped = {**output, "artifacts": kept}
        if left:
            mapped["omitted_artifacts"] = left
        return mapped

    def _artifact(self, entry: dict[str, Any], listed: dict[str, Any], path: str) -> dict[str, Any]:
        size, digest = self.received[path]
        mapped = {**entry, "size": size, "sha256": digest.hexdigest()}
        if listed.get("sampled"):
            mapped.update(display="sampled", source_size=entry.get("size"))
        return mapped

    def _status(
        self, record: dict[str, Any], replica: dict[str, Any], output: dict[str, Any]
    ) -> dict[str, Any]:
        task = parse_task_id(self.task_id)
        created = record.get("created_at") or record.get("started_at") or record.get("finished_at")
        status = {
            "task_id": self.task_id,
            "run_id": record["run_id"],
            "task_type": task.task_type,
            "task_name": task.task_name,
            "state": record["state"],
            "config": _object(record.get("input_params")),
            "created_at": created if isinstance(created, str) else utcnow(),
            "pid": None,
            "result": output,
            "steps": [_step(step) for step in record.get("steps") or [] if isinstance(step, dict)],
            "log_path": "",
            "axonx_replica": replica,
        }
        status.update({name: record[name] for name in STATUS_FIELDS if name in record})
        return status

    def _metadata(self, record: dict[str, Any], output: dict[str, Any]) -> dict[str, Any]:
        task = parse_task_id(self.task_id)
        created = record.get("created_at") or record.get("finished_at")
        return {
            "task_id": self.task_id,
            "reg_name": record.get("reg_name") or task.task,
            "created_at": created if isinstance(created, str) else utcnow(),
            "task_type": task.task_type,
            "input_params": _object(record.get("input_params")),
            "output_params": output,
        }


def _step(step: dict[str, Any]) -> dict[str, Any]:
    """AxonX's ``TaskStepStatus`` as a runyard step: a percentage it left unset is 100
    for a step done, 0 otherwise; its other fields are kept."""
    percentage = step.get("percentage")
    if not isinstance(percentage, int | float):
        percentage = 100.0 if step.get("state") == "done" else 0.0
    return {**step, "name": str(step.get("name", "")), "percentage": float(percentage)}


def _object(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def _add_json(writer: tarfile.TarFile, name: str, data: dict[str, Any]) -> None:
    raw = json.dumps(data, ensure_ascii=False, indent=2).encode()
    member = tarfile.TarInfo(name)
    member.size = len(raw)
    member.mode = 0o644
    writer.addfile(member, io.BytesIO(raw))


def _refused(task_id: str, reason: str) -> SyncRefused:
    return SyncRefused(task_id, "verification", f"AxonX replica refused: {reason}")
