"""Sync through one archive in the workspace, as AxonX 0.2.2 peers speak it: the receiver
answers an index of the tasks it holds from sync (``task_sync_index``), the sender stages
one gzipped tar of the tasks that differ in the receiver's workspace and asks it to apply
it (``sync_tasks``), with the task folders to delete first.

The archive's members are ``<task type>/<task id>/<member>``, the workspace-relative task
folder then a member of runyard's own one-task tar (:mod:`runyard.sync.tarstream`:
``task/<path>`` or ``log``), each task's members together. Applying splits it into one
tar a task and hands each to :func:`runyard.sync.receiver.apply_task_stream`, so a task
that arrives this way passes every check of ``POST /api/v1/sync/tasks`` (members, sizes,
hashes, free space, the diff rules under the task's claim). Before anything is applied or
deleted, the whole archive's member names and every deletion are checked; a task the
receiver refuses stops the apply there, the tasks before it staying applied.

A task whose members include ``<type>/<task id>/metadata.json`` is an AxonX 0.2.2 display
replica (what AxonX's own sync sender archives): :mod:`runyard.sync.axonx_replica` renames
its members into the one-task tar, checks its manifest and writes runyard's records, and
the receiver's checks then run as for any task. Its index entry is the replica's manifest,
as AxonX reads it back.

A deletion is a task folder (``<type>/<task id>``) of a finished task received by sync;
anything else (a task made here, an active one, a path that is no task folder) refuses the
whole call. Received tasks say ``synced_from: {"server": "sync_tasks"}``.

>>> names = build_archive(workspace, ["base#demo#a"], Path("out.tar.gz"))
>>> apply_archive(workspace, Path("out.tar.gz"), [], limits, delete, refresh)
"""

from __future__ import annotations

import contextlib
import gzip
import os
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from runyard.errors import InvalidInput
from runyard.sync import axonx_replica
from runyard.sync.axonx_replica import ReplicaTask
from runyard.sync.candidates import metadata_sha256
from runyard.sync.deletion import source_of
from runyard.sync.errors import SyncRefused
from runyard.sync.members import MAX_MEMBERS
from runyard.sync.receiver import ReceiveLimits, apply_task_stream
from runyard.sync.tarstream import task_tar_stream
from runyard.workspace.identity import parse_task_id
from runyard.workspace.layout import Workspace
from runyard.workspace.safefs import walk_files

ORIGIN = {"server": "sync_tasks"}
POLICY = "runyard-sync-1"
MAX_DELETIONS = 200
ARCHIVE_MEMBERS = 100_000


@dataclass
class ApplyReport:
    """AxonX's ``SyncTasksReport``: what one ``sync_tasks`` did."""

    archive: str | None = None
    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    files: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "archive": self.archive,
            "applied": self.applied,
            "deleted": self.deleted,
            "files": self.files,
        }


def task_folder(task_id: str) -> str:
    """The workspace-relative folder of ``task_id``: ``<type>/<task id>``."""
    return f"{parse_task_id(task_id).task_type}/{task_id}"


def folder_task(relative: str) -> str:
    """The task id of a workspace-relative task folder; InvalidInput for anything else."""
    parts = relative.split("/")
    if len(parts) != 2 or parse_task_id(parts[1]).task_type != parts[0]:
        raise InvalidInput(f"{relative[:200]!r} is not a task folder (<type>/<task id>)")
    return parts[1]


def index(workspace: Workspace, task_names: frozenset[str], budget: int) -> dict[str, Any]:
    """Every finished task received by sync whose name part (after the last ``#``) is one of
    ``task_names`` (all when empty), in AxonX's ``{run_id, **DisplayReplica}`` shape."""
    tasks: dict[str, Any] = {}
    for task_id, folder in workspace.iter_task_dirs():
        if task_names and task_id.rsplit("#", 1)[-1] not in task_names:
            continue
        status = workspace.read_status(task_id)
        if status is None or not status.terminal or source_of(status) is None:
            continue
        files = {
            entry.relative: {"size": entry.info.st_size, "revision": _revision(entry.info)}
            for entry in walk_files(folder)
        }
        replica = (status.model_extra or {}).get("axonx_replica")
        if isinstance(replica, dict):  # received from an AxonX peer: its own manifest
            tasks[task_id] = {"run_id": status.run_id, **replica}
            continue
        digest = metadata_sha256(workspace, task_id)
        tasks[task_id] = {
            "run_id": status.run_id,
            "purpose": "display",
            "source_revision": f"metadata:{digest}" if digest else f"run:{status.run_id}",
            "policy_revision": f"{POLICY}:{budget}",
            "files": files,
            "omitted": {},
            "source_log_path": "",
            "snapshot": None,
            "log": None,
        }
    return tasks


def _revision(info: os.stat_result) -> str:
    """What changes when a file is rewritten: its size and modification time."""
    return f"{info.st_size}:{info.st_mtime_ns}"


def build_archive(workspace: Workspace, task_ids: list[str], target: Path) -> list[str]:
    """Write the archive of the finished ``task_ids`` to ``target``; their folders."""
    with (
        target.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as out,
        tempfile.TemporaryDirectory(prefix="runyard-sync-") as scratch,
    ):
        for task_id in task_ids:
            status = workspace.read_status(task_id)
            if status is None or not status.terminal:
                raise InvalidInput(f"{task_id}: only a finished task is sent")
            one = Path(scratch) / "task.tar"
            with one.open("wb") as handle:
                for chunk in task_tar_stream(workspace, status):
                    handle.write(chunk)
            with tarfile.open(one) as inner:
                for member in inner:
                    body = inner.extractfile(member) if member.isfile() else None
                    member.name = f"{task_folder(task_id)}/{member.name}"
                    out.addfile(member, body)
    return [task_folder(task_id) for task_id in task_ids]


def apply_archive(
    workspace: Workspace,
    archive: Path | None,
    deletions: list[str],
    limits: ReceiveLimits,
    delete: Callable[[list[str]], list[str]],
    refresh: Callable[[str], Any],
    name: str | None = None,
) -> ApplyReport:
    """Delete ``deletions``, then apply each task of ``archive`` (see the module docstring);
    ``refresh`` is called with each task id deleted or applied, as it is.
    :class:`SyncRefused` for a task the receiver refuses, naming those applied before it."""
    doomed = _deletable(workspace, deletions)
    groups, replicas = _groups(archive) if archive is not None else ({}, {})
    overlap = sorted(set(doomed) & set(groups))
    if overlap:
        raise InvalidInput(f"tasks cannot be replaced and deleted together: {overlap[:5]}")
    report = ApplyReport(archive=name)
    gone = delete(doomed) if doomed else []
    report.deleted = [task_folder(task_id) for task_id in doomed if task_id in gone]
    for task_id in gone:
        refresh(task_id)
    if archive is None:
        return report
    with tempfile.TemporaryDirectory(prefix=".sync-archive-", dir=workspace.root) as scratch:
        try:
            for task_id, count in _split(workspace, archive, Path(scratch), limits, replicas):
                refresh(task_id)
                report.applied.append(task_folder(task_id))
                report.files += count
        except SyncRefused as exc:
            before = f"; applied before it: {report.applied}" if report.applied else ""
            raise SyncRefused(exc.task_id, exc.code, exc.reason + before) from None
    return report


def _deletable(workspace: Workspace, deletions: list[str]) -> list[str]:
    if len(set(deletions)) > MAX_DELETIONS:
        raise InvalidInput(f"at most {MAX_DELETIONS} task deletions at once")
    doomed = []
    for relative in dict.fromkeys(deletions):
        task_id = folder_task(relative)
        status = workspace.read_status(task_id)
        if status is None:
            continue  # already gone: nothing to do
        if source_of(status) is None:
            raise InvalidInput(f"{relative}: not received by sync; only those are deleted")
        if not status.terminal:
            raise InvalidInput(f"{relative}: active here, not deleted")
        doomed.append(task_id)
    return doomed


def _groups(archive: Path) -> tuple[dict[str, int], dict[str, str | None]]:
    """The archive's tasks and member counts, in order, and its AxonX replicas with the
    member each names as its log; InvalidInput for a bad layout."""
    groups: dict[str, int] = {}
    replicas: dict[str, str | None] = {}
    last = None
    for member, body in _members(archive):
        parts = PurePosixPath(member.name).parts
        if len(parts) < 3 or "/".join(parts) != member.name:
            raise InvalidInput(f"archive member {member.name[:200]!r} is not <type>/<id>/...")
        task_id = folder_task("/".join(parts[:2]))
        if axonx_replica.is_replica_record("/".join(parts[2:])) and member.isfile():
            record = axonx_replica.read_record(task_id, body, member.size)
            replicas[task_id] = axonx_replica.log_path_of(record)
        if task_id != last and task_id in groups:
            raise InvalidInput(f"archive members of {task_id} are not together")
        last = task_id
        groups[task_id] = groups.get(task_id, 0) + 1
        if sum(groups.values()) > ARCHIVE_MEMBERS or groups[task_id] > MAX_MEMBERS:
            raise InvalidInput("the archive has too many members")
    return groups, replicas


def _members(archive: Path) -> Iterator[tuple[tarfile.TarInfo, IO[bytes] | None]]:
    """Each member, with its body while it is the current one (a stream reads on)."""
    try:
        with tarfile.open(archive, mode="r|gz") as tar:
            for member in tar:
                yield member, tar.extractfile(member) if member.isfile() else None
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise InvalidInput(f"not a gzipped tar archive: {exc}") from None


def _split(
    workspace: Workspace,
    archive: Path,
    scratch: Path,
    limits: ReceiveLimits,
    replicas: dict[str, str | None],
) -> Iterator[tuple[str, int]]:
    """Apply the archive's tasks one by one: each task id, as it is applied, with its count
    of members. A task's members are copied into a one-task tar, at most
    ``limits.max_bytes`` of file bodies (a gzip bomb stops there), then applied."""
    current: str | None = None
    writer: tarfile.TarFile | None = None
    replica: ReplicaTask | None = None
    count = size = 0
    with tarfile.open(archive, mode="r|gz") as tar, contextlib.ExitStack() as closing:
        closing.callback(lambda: _close(writer))
        for member in tar:
            task_id = member.name.split("/")[1]
            if task_id != current:
                if writer is not None and current is not None:
                    yield _apply_one(workspace, current, writer, limits, replica), count
                current, count, size = task_id, 0, 0
                replica = ReplicaTask(task_id, replicas[task_id]) if task_id in replicas else None
                # closed by _apply_one once the task's members are in (or on a refusal)
                one = scratch / "task.tar"
                writer = tarfile.open(one, mode="w", format=tarfile.PAX_FORMAT)  # noqa: SIM115
            assert writer is not None
            size += member.size
            if size > limits.max_bytes:
                writer.close()
                raise InvalidInput(f"{task_id}: larger than sync.max_task_mb; not applied")
            body = tar.extractfile(member) if member.isfile() else None
            member.name = member.name.split("/", 2)[2]
            if replica is None:
                writer.addfile(member, body)
            else:
                replica.add(writer, member, body)
            count += 1
        if writer is not None and current is not None:  # its records are added while open
            yield _apply_one(workspace, current, writer, limits, replica), count


def _close(writer: tarfile.TarFile | None) -> None:
    if writer is not None:
        writer.close()


def _apply_one(
    workspace: Workspace,
    task_id: str,
    writer: tarfile.TarFile,
    limits: ReceiveLimits,
    replica: ReplicaTask | None,
) -> str:
    if replica is not None:
        replica.finish(writer)  # SyncRefused: its manifest or records are wrong
    writer.close()
    assert writer.name is not None
    origin = axonx_replica.ORIGIN if replica is not None else ORIGIN
    with open(writer.name, "rb") as reader:
        apply_task_stream(workspace, task_id, reader, dict(origin), limits)
    return task_id
