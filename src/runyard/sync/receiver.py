"""Apply one task's tar stream: stage, verify, rename into place — whole or not at all.

Everything in the stream is untrusted, even from an admin: the sender's task folder was
writable by the task. Before anything is made, the task id (from the URL) is checked and
the workspace must have more than ``min_free_mb`` free (507 otherwise). The stream is read
member by member into a hidden folder in the workspace's staging area
(``.staging/.staging-<random>-<task id>``, the convention of :mod:`runyard.runtime.creation`,
so a crash leaves only what :func:`runyard.runtime.orphans.reconcile_orphans` sweeps at the
next start). One member that breaks the rules of :mod:`runyard.sync.members` (a link, a
device, a sparse file, ``..``, an absolute, hidden, repeated, over-long or too deep name)
refuses the whole task (422 ``bad_member``); so do more than :data:`MAX_MEMBERS` members,
or more bytes than ``limits.max_bytes`` counted as they are written (413 ``too_large``),
or a member that would leave less than ``min_free_mb`` free (507). Then:

- ``status.json`` must be JSON within bounds (size, nesting), this task's, terminal, with a
  valid ``run_id``; ``metadata.json`` (if any) this task's;
- every artifact named by the metadata or the status result must have arrived with the
  recorded size and sha256 (hashed while it was written, not re-read);
- each kept earlier run (``runs/<run_id>/...`` members, :mod:`runyard.sync.keptruns`)
  must carry a terminal status of its own; under the claim it goes to the history;
- the status gets ``log_path`` pointing at this server's log layout and ``synced_from``;
- under the task's claim lock the rules of :mod:`runyard.sync.diff` are checked again
  (the task may have been submitted here meanwhile), the log is moved to the path the
  workspace derives from the two validated ids (``logs/<type>/<task id>/<run id>.log``,
  never one a record names; no symlink followed on the way) and the folder renamed into
  place.

>>> outcome = apply_task_stream(workspace, "base#demo#a", reader, {"server": "lab-1/…"})
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import shutil
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pydantic_core import from_json

from runyard.errors import InsufficientStorage, UnsafePath
from runyard.runtime.creation import claim, remove_task_dir, staging_path
from runyard.sync.candidates import Candidate
from runyard.sync.diff import REFUSE, SKIP, decide
from runyard.sync.errors import SyncRefused
from runyard.sync.keptruns import (
    RUNS_PREFIX,
    check_staged_runs,
    place_staged_runs,
    run_member_target,
)
from runyard.sync.members import (
    BLOCK,
    CHUNK,
    FILE_TYPES,
    LOG_MEMBER,
    MAX_MEMBERS,
    BoundedTarInfo,
    task_parts,
)
from runyard.workspace.artifacts import check_relative_path
from runyard.workspace.atomic import fsync_dir, read_bytes_tolerant, write_json_atomic
from runyard.workspace.identity import parse_task_id
from runyard.workspace.layout import METADATA_FILE, STATUS_FILE, Workspace
from runyard.workspace.records import TaskStatus, metadata_from_dict, status_from_dict, utcnow
from runyard.workspace.safefs import DIR_FLAGS, open_root
from runyard.workspace.space import free_mb, is_space_error, require_space

STAGED_LOG = ".sync-log"  # hidden: no member can carry this name
MAX_RECORD_BYTES = 32 << 20  # status.json, metadata.json
MIB = 1 << 20
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# what tarfile raises on a stream it cannot read (a chain of extended headers recurses)
TAR_ERRORS = (tarfile.TarError, ValueError, EOFError, OverflowError, RecursionError)


@dataclass(frozen=True)
class ReceiveLimits:
    """What one received task may take: ``max_bytes`` in all (file bodies as written, and
    one 512-byte block a member), never the workspace's last ``min_free_mb``."""

    max_bytes: int = 10240 * MIB
    min_free_mb: int = 0


@dataclass
class Staged:
    """What arrived: the staging folder and ``{relative path: (size, sha256)}``."""

    folder: Path
    limits: ReceiveLimits = field(default_factory=ReceiveLimits)
    files: dict[str, tuple[int, str]] = field(default_factory=dict)
    has_log: bool = False
    bytes: int = 0  # file bodies written
    charged: int = 0  # counted against limits.max_bytes
    members: int = 0
    kept_runs: list[str] = field(default_factory=list)  # earlier runs (sync/keptruns.py)

    def admit(self, task_id: str, member: tarfile.TarInfo) -> None:
        """Count ``member`` in, refusing it before anything of it is written."""
        self.members += 1
        if self.members > MAX_MEMBERS:
            raise SyncRefused(task_id, "too_large", f"more than {MAX_MEMBERS} members")
        self.spend(task_id, BLOCK)
        size = member.size if member.type in FILE_TYPES else 0
        if self.charged + size > self.limits.max_bytes:
            raise _too_large(task_id, self.limits)
        _require_room(self.folder, size, self.limits.min_free_mb)

    def spend(self, task_id: str, count: int) -> None:
        self.charged += count
        if self.charged > self.limits.max_bytes:
            raise _too_large(task_id, self.limits)


@dataclass(frozen=True)
class Outcome:
    task_id: str
    action: str  # "applied", "replaced" (an older run was replaced) or "skipped"
    replaced_run: str | None
    bytes: int


def apply_task_stream(
    workspace: Workspace,
    task_id: str,
    reader: IO[bytes],
    synced_from: dict[str, Any],
    limits: ReceiveLimits | None = None,
) -> Outcome:
    """Read a task tar from ``reader`` and apply it; :class:`SyncRefused` if refused,
    :class:`InsufficientStorage` when it would eat the last ``min_free_mb``."""
    limits = limits or ReceiveLimits()
    parse_task_id(task_id)
    require_space(workspace.root, limits.min_free_mb)
    task_dir = workspace.task_dir(task_id)
    task_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_path(workspace, task_id)
    staging.mkdir()
    try:
        staged = Staged(staging, limits)
        _receive(task_id, reader, staged)
        status = _verify(task_id, staged)
        staged.kept_runs = check_staged_runs(staging, status)  # before any claim is taken
        status = _finish_status(workspace, staged, status, synced_from)
        return _commit(workspace, staged, status)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _receive(task_id: str, reader: IO[bytes], staged: Staged) -> None:
    try:
        # the open reads the first header, which may be refused: the ``with`` is below
        tar = tarfile.open(fileobj=reader, mode="r|", tarinfo=BoundedTarInfo)  # noqa: SIM115
    except TAR_ERRORS as exc:
        raise _unreadable(task_id, exc) from exc
    with tar:
        while (member := _next_member(task_id, tar)) is not None:
            _receive_member(task_id, tar, member, staged)
            # a stream's TarFile keeps every member it read; nothing here looks one up
            tar.members.clear()  # type: ignore[attr-defined]


def _next_member(task_id: str, tar: tarfile.TarFile) -> tarfile.TarInfo | None:
    try:
        return tar.next()
    except TAR_ERRORS as exc:
        raise _unreadable(task_id, exc) from exc


def _member_target(task_id: str, member: tarfile.TarInfo, staged: Staged) -> str | None:
    """The relative path a member lands at (None for the log), or a refusal."""
    if member.type not in FILE_TYPES and not member.isdir():
        raise SyncRefused(task_id, "bad_member", f"{member.name!r} is not a file or folder")
    if member.name == LOG_MEMBER and member.type in FILE_TYPES and not staged.has_log:
        return None
    if member.name.startswith(RUNS_PREFIX) and member.type in FILE_TYPES:
        rel = run_member_target(task_id, member.name)  # a kept run's (sync/keptruns.py)
        if rel in staged.files:
            raise SyncRefused(task_id, "bad_member", f"{member.name!r} is repeated")
        return rel
    try:
        rel = "/".join(task_parts(member.name, directory=member.isdir()))
    except UnsafePath as exc:
        raise SyncRefused(task_id, "bad_member", f"member {exc}") from exc
    if rel in staged.files:
        raise SyncRefused(task_id, "bad_member", f"{member.name!r} is repeated")
    return rel


def _receive_member(
    task_id: str, tar: tarfile.TarFile, member: tarfile.TarInfo, staged: Staged
) -> None:
    rel = _member_target(task_id, member, staged)
    staged.admit(task_id, member)
    target = staged.folder / STAGED_LOG if rel is None else staged.folder / rel
    try:
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        source = tar.extractfile(member)
        assert source is not None  # a regular member always has a body
        size, digest = _copy_hashed(task_id, source, target, staged)
    except OSError as exc:
        raise _write_error(task_id, member.name, exc) from exc
    except TAR_ERRORS as exc:
        raise _unreadable(task_id, exc) from exc
    staged.bytes += size
    if rel is None:
        staged.has_log = True
    else:
        staged.files[rel] = (size, digest)


def _copy_hashed(task_id: str, source: IO[bytes], target: Path, staged: Staged) -> tuple[int, str]:
    """Copy in chunks, hashing and counting what is written on the way; a name that
    exists already is refused by O_EXCL, and O_NOFOLLOW keeps it from being a link."""
    digest = hashlib.sha256()
    size = 0
    with os.fdopen(os.open(target, CREATE_FLAGS, 0o644), "wb") as out:
        while chunk := source.read(CHUNK):
            staged.spend(task_id, len(chunk))
            digest.update(chunk)
            out.write(chunk)
            size += len(chunk)
        out.flush()
        os.fsync(out.fileno())
    return size, digest.hexdigest()


def _verify(task_id: str, staged: Staged) -> TaskStatus:
    status = status_from_dict(_read_record(task_id, staged, STATUS_FILE), task_id)
    if status is None or not status.terminal:
        raise SyncRefused(task_id, "verification", "no terminal status.json for this task")
    raw_meta = _read_record(task_id, staged, METADATA_FILE)
    meta = metadata_from_dict(raw_meta, task_id)
    if raw_meta is not None and meta is None:
        raise SyncRefused(task_id, "verification", "metadata.json is not this task's")
    records = [status.result.get("artifacts")]
    if meta is not None:
        records.append(meta.output_params.get("artifacts"))
    for artifacts in records:
        _verify_artifacts(task_id, artifacts, staged)
    return status


def _read_record(task_id: str, staged: Staged, name: str) -> dict[str, Any] | None:
    """A received record as a JSON object; parsed with a bounded nesting depth (Python's
    ``json`` would recurse once a level and fail deep inside the server)."""
    raw = read_bytes_tolerant(staged.folder / name, limit=MAX_RECORD_BYTES)
    if raw is None:
        return None
    try:
        data = from_json(raw, allow_inf_nan=False)
    except ValueError as exc:
        reason = f"{name} is not JSON runyard reads: {exc}"
        raise SyncRefused(task_id, "verification", reason) from exc
    if not isinstance(data, dict):
        raise SyncRefused(task_id, "verification", f"{name} is not a JSON object")
    return data


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
            _place_log(workspace, staged, status)
        place_staged_runs(workspace, staged.folder, task_id, staged.kept_runs)
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


def _place_log(workspace: Workspace, staged: Staged, status: TaskStatus) -> None:
    """Move the staged log to the run's log path, derived from the validated ids; each
    folder on the way is made or opened under the log folder without following a link."""
    final = workspace.run_log_path(status.task_id, status.run_id)
    *folders, name = final.relative_to(workspace.log_dir).parts
    staged_log = staged.folder / STAGED_LOG
    _require_room(workspace.log_dir, staged_log.stat().st_size, staged.limits.min_free_mb)
    workspace.log_dir.mkdir(parents=True, exist_ok=True)
    folder = open_root(workspace.log_dir)
    try:
        for part in folders:
            child = _log_subfolder(folder, part)
            os.close(folder)
            folder = child
        _move_into(staged_log, folder, name)
    finally:
        os.close(folder)


def _log_subfolder(folder: int, part: str) -> int:
    with contextlib.suppress(FileExistsError):
        os.mkdir(part, 0o755, dir_fd=folder)
    try:
        return os.open(part, DIR_FLAGS, dir_fd=folder)
    except OSError as exc:
        raise UnsafePath(part, f"the log folder could not be opened as a folder: {exc}") from exc


def _move_into(staged_log: Path, folder: int, name: str) -> None:
    tmp = f".{name}.{secrets.token_hex(4)}.sync"
    try:
        os.rename(staged_log, tmp, dst_dir_fd=folder)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        _copy_into(staged_log, folder, tmp)  # the log folder is on another file system
    os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    os.fsync(folder)


def _copy_into(source: Path, folder: int, name: str) -> None:
    with (
        open(source, "rb") as src,
        os.fdopen(os.open(name, CREATE_FLAGS, 0o644, dir_fd=folder), "wb") as out,
    ):
        shutil.copyfileobj(src, out, CHUNK)
        out.flush()
        os.fsync(out.fileno())


def _require_room(path: Path, size: int, min_free_mb: int) -> None:
    """:class:`InsufficientStorage` when writing ``size`` bytes under ``path`` would leave
    less than ``min_free_mb`` free."""
    if min_free_mb <= 0:
        return
    try:
        free = free_mb(path)
    except OSError:
        return  # cannot tell: the write itself will say
    if free - size / MIB < min_free_mb:
        raise InsufficientStorage(
            f"Receiving this task would leave less than min_free_mb={min_free_mb} MB free "
            f"({free:.0f} MB free, {size / MIB:.0f} MB to write); nothing was kept"
        )


def _too_large(task_id: str, limits: ReceiveLimits) -> SyncRefused:
    return SyncRefused(
        task_id, "too_large",
        f"more than sync.max_task_mb={limits.max_bytes // MIB} MiB (file bodies and "
        f"{BLOCK} bytes a member); nothing was kept",
    )  # fmt: skip


def _unreadable(task_id: str, exc: BaseException) -> SyncRefused:
    return SyncRefused(task_id, "bad_member", f"not a tar stream the receiver takes: {exc}")


def _write_error(task_id: str, name: str, exc: OSError) -> Exception:
    """A failed write: a full disk is a 507, anything else (a name that is a file and a
    folder, too long for the system) is the member's fault."""
    if is_space_error(exc):
        return InsufficientStorage(f"Not enough disk space to receive {task_id}: {exc}")
    return SyncRefused(task_id, "bad_member", f"{name[:200]!r} cannot be written: {exc.strerror}")
