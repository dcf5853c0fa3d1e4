"""Apply one task's tar stream: stage, verify, rename into place — whole or not at all.

The stream is read member by member into a hidden folder in the workspace's staging area
(``.staging/.staging-<random>-<task id>``, the convention of :mod:`runyard.runtime.creation`,
so a crash leaves only what :func:`runyard.runtime.orphans.reconcile_orphans` sweeps at the
next start). A member that is not a plain file or folder under ``task/`` (links, devices,
absolute paths, ``..``, hidden names, duplicates) refuses the whole task. Then:

- ``status.json`` must be this task's, terminal; ``metadata.json`` (if any) this task's;
- every artifact named by the metadata or the status result must have arrived with the
  recorded size and sha256 (hashed while it was written, not re-read);
- the status gets ``log_path`` pointing at this server's log layout and ``synced_from``;
- under the task's claim lock the rules of :mod:`runyard.sync.diff` are checked again
  (the task may have been submitted here meanwhile), the log is moved into
  ``logs/<type>/<task id>/<run id>.log`` and the folder renamed into place.

>>> outcome = apply_task_stream(workspace, "base#demo#a", reader, {"server": "lab-1/…"})
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from runyard.errors import UnsafePath
from runyard.runtime.creation import claim, remove_task_dir, staging_path
from runyard.sync.candidates import Candidate
from runyard.sync.diff import REFUSE, SKIP, decide
from runyard.sync.errors import SyncRefused
from runyard.sync.tarstream import CHUNK, LOG_MEMBER, TASK_PREFIX
from runyard.workspace.artifacts import check_relative_path
from runyard.workspace.atomic import fsync_dir, read_json_tolerant, write_json_atomic
from runyard.workspace.layout import METADATA_FILE, STATUS_FILE, Workspace
from runyard.workspace.records import TaskStatus, metadata_from_dict, status_from_dict, utcnow

STAGED_LOG = ".sync-log"  # hidden: no member can carry this name


@dataclass
class Staged:
    """What arrived: the staging folder and ``{relative path: (size, sha256)}``."""

    folder: Path
    files: dict[str, tuple[int, str]] = field(default_factory=dict)
    has_log: bool = False
    bytes: int = 0


@dataclass(frozen=True)
class Outcome:
    task_id: str
    action: str  # "applied", "replaced" (an older run was replaced) or "skipped"
    replaced_run: str | None
    bytes: int


def apply_task_stream(
    workspace: Workspace, task_id: str, reader: IO[bytes], synced_from: dict[str, Any]
) -> Outcome:
    """Read a task tar from ``reader`` and apply it; :class:`SyncRefused` if refused."""
    task_dir = workspace.task_dir(task_id)
    task_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_path(workspace, task_id)
    staging.mkdir()
    try:
        staged = Staged(staging)
        _receive(task_id, reader, staged)
        status = _verify(task_id, staged)
        status = _finish_status(workspace, staged, status, synced_from)
        return _commit(workspace, staged, status)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _receive(task_id: str, reader: IO[bytes], staged: Staged) -> None:
    try:
        with tarfile.open(fileobj=reader, mode="r|") as tar:
            for member in tar:
                _receive_member(task_id, tar, member, staged)
    except tarfile.TarError as exc:
        raise SyncRefused(task_id, "bad_member", f"not a readable tar stream: {exc}") from exc


def _member_target(task_id: str, member: tarfile.TarInfo, staged: Staged) -> str | None:
    """The relative path a member lands at (None for the log), or a refusal."""
    if not (member.isreg() or member.isdir()):
        raise SyncRefused(task_id, "bad_member", f"{member.name!r} is not a file or folder")
    if member.name == LOG_MEMBER and member.isreg() and not staged.has_log:
        return None
    rel = member.name[len(TASK_PREFIX) :] if member.name.startswith(TASK_PREFIX) else ""
    try:
        pure = check_relative_path(rel.rstrip("/"))
    except UnsafePath as exc:
        raise SyncRefused(task_id, "bad_member", f"{member.name!r}: {exc}") from exc
    if any(part.startswith(".") for part in pure.parts) or str(pure) in staged.files:
        raise SyncRefused(task_id, "bad_member", f"{member.name!r} is hidden or repeated")
    return str(pure)


def _receive_member(
    task_id: str, tar: tarfile.TarFile, member: tarfile.TarInfo, staged: Staged
) -> None:
    rel = _member_target(task_id, member, staged)
    if rel is None:
        staged.has_log = True
        target = staged.folder / STAGED_LOG
    else:
        target = staged.folder.joinpath(*rel.split("/"))
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
    source = tar.extractfile(member)
    assert source is not None  # a regular member always has a body
    size, digest = _copy_hashed(source, target)
    staged.bytes += size
    if rel is not None:
        staged.files[rel] = (size, digest)


def _copy_hashed(source: IO[bytes], target: Path) -> tuple[int, str]:
    """Copy in chunks, hashing on the way; a name that exists already is refused by
    O_EXCL, and O_NOFOLLOW keeps a path we made from being a link."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    digest = hashlib.sha256()
    size = 0
    with os.fdopen(os.open(target, flags, 0o644), "wb") as out:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            out.write(chunk)
            size += len(chunk)
        out.flush()
        os.fsync(out.fileno())
    return size, digest.hexdigest()


def _verify(task_id: str, staged: Staged) -> TaskStatus:
    status = status_from_dict(read_json_tolerant(staged.folder / STATUS_FILE), task_id)
    if status is None or not status.terminal:
        raise SyncRefused(task_id, "verification", "no terminal status.json for this task")
    raw_meta = read_json_tolerant(staged.folder / METADATA_FILE)
    meta = metadata_from_dict(raw_meta, task_id)
    if raw_meta is not None and meta is None:
        raise SyncRefused(task_id, "verification", "metadata.json is not this task's")
    records = [status.result.get("artifacts")]
    if meta is not None:
        records.append(meta.output_params.get("artifacts"))
    for artifacts in records:
        _verify_artifacts(task_id, artifacts, staged)
    return status


def _verify_artifacts(task_id: str, artifacts: Any, staged: Staged) -> None:
    if not artifacts:
        return
    if not isinstance(artifacts, dict):
        raise SyncRefused(task_id, "verification", "artifacts must be an object")
    for name, record in artifacts.items():
        path = record.get("path") if isinstance(record, dict) else None
        try:
            rel = str(check_relative_path(path))
        except UnsafePath as exc:
            raise SyncRefused(task_id, "verification", f"artifact {name}: {exc}") from exc
        got = staged.files.get(rel)
        want = (record.get("size"), record.get("sha256"))
        if got != want:
            raise SyncRefused(
                task_id, "verification",
                f"artifact {name} ({rel}): expected size {want[0]} sha256 {want[1]}, "
                f"received {'nothing' if got is None else f'size {got[0]} sha256 {got[1]}'}",
            )  # fmt: skip


def _finish_status(
    workspace: Workspace, staged: Staged, status: TaskStatus, synced_from: dict[str, Any]
) -> TaskStatus:
    log_path = workspace.run_log_path(status.task_id, status.run_id)
    data = status.to_json()
    data["log_path"] = os.path.abspath(log_path) if staged.has_log else ""
    data["synced_from"] = {**synced_from, "run_id": status.run_id, "at": utcnow()}
    write_json_atomic(staged.folder / STATUS_FILE, data)
    fsync_dir(staged.folder)
    return TaskStatus.model_validate(data)


def _commit(workspace: Workspace, staged: Staged, status: TaskStatus) -> Outcome:
    task_id = status.task_id
    task_dir = workspace.task_dir(task_id)
    with claim(workspace, task_id):
        decision = decide(workspace, _staged_candidate(staged, status))
        if decision.action == REFUSE:
            raise SyncRefused(task_id, decision.code, decision.reason)
        if decision.action == SKIP:
            return Outcome(task_id, "skipped", None, staged.bytes)
        previous = workspace.read_status(task_id)
        if staged.has_log:
            _place_log(staged.folder / STAGED_LOG, Path(status.log_path))
        remove_task_dir(workspace, task_id)
        os.rename(staged.folder, task_dir)
        fsync_dir(task_dir.parent)
    replaced = None
    if previous is not None and previous.run_id != status.run_id:
        replaced = previous.run_id
    return Outcome(task_id, "replaced" if replaced else "applied", replaced, staged.bytes)


def _staged_candidate(staged: Staged, status: TaskStatus) -> Candidate:
    """The staged task as a candidate: its metadata hash is the one that arrived."""
    meta = staged.files.get(METADATA_FILE)
    digest = meta[1] if meta else ""
    return Candidate(status.task_id, status.run_id, digest, status.finished_at or "")


def _place_log(staged_log: Path, final: Path) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{secrets.token_hex(4)}.sync")
    shutil.move(staged_log, tmp)  # a copy when the log folder is on another file system
    os.replace(tmp, final)
