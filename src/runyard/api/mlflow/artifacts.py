"""A run's artifacts through MLflow's ``mlflow-artifacts`` API: files of its task folder.

A run's ``artifact_uri`` is ``mlflow-artifacts:/<experiment id>/<run id>/artifacts``; the
client turns it into ``/mlflow/api/2.0/mlflow-artifacts/artifacts/<exp>/<run>/artifacts/
<path>`` and uploads with ``PUT``, downloads with ``GET`` and lists with ``GET
.../artifacts?path=<exp>/<run>/artifacts/<folder>``. ``<path>`` is a file of the run's
folder (the task folder of a current run, the kept entry of an earlier one), so what
MLflow's client logs is what ``/api/v1/tasks/{id}/files`` lists and downloads.

Paths follow the rules of every served file (:func:`runyard.workspace.safefs.split_relative`:
no ``..``, nothing absolute, no hidden names, no NUL or backslash, names of at most 255
bytes); the record files at the top of the folder (``status.json``, ``metrics.jsonl``...)
are not artifacts and cannot be written. An upload goes to a hidden temp file in its
folder (folders made and entered without following symlinks) and is renamed into place
once whole; past ``upload_max_bytes`` it stops (413) and leaves nothing. Only a run
MLflow's client opened takes uploads; any run's files can be listed and downloaded.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool

from runyard.api.mlflow.errors import INVALID, NOT_FOUND, MlflowRefusal
from runyard.api.mlflow.lookup import RunRef, find_run
from runyard.api.mlflow.record import writable_run
from runyard.api.mlflow.runview import experiment_id_of
from runyard.api.services import Services
from runyard.errors import BodyTooLarge, NoSuchFile, UnsafePath
from runyard.tracking.points import METRICS_FILE, PARAMS_FILE
from runyard.workspace.layout import EVENTS_FILE, METADATA_FILE, STATUS_FILE
from runyard.workspace.safefs import DIR_FLAGS, OpenedFile, open_under, split_relative, walk_files

RECORD_FILES = frozenset({STATUS_FILE, METADATA_FILE, EVENTS_FILE, METRICS_FILE, PARAMS_FILE})
ARTIFACTS = "artifacts"
MAX_LISTED = 10_000
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
TMP_PREFIX = ".upload-"
FLUSH_BYTES = 1 << 20


@dataclass(frozen=True)
class ArtifactPath:
    """``<experiment id>/<run id>/artifacts[/<relative>]`` resolved to a run."""

    ref: RunRef
    relative: str  # "" for the run's root


def resolve(services: Services, path: str) -> ArtifactPath:
    parts = path.strip("/").split("/", 3)
    if len(parts) < 3 or parts[2] != ARTIFACTS:
        raise MlflowRefusal(NOT_FOUND, f"No artifact path {path[:120]!r}: expected "
                            "<experiment id>/<run id>/artifacts/<path>")  # fmt: skip
    ref = find_run(services, parts[1])
    if experiment_id_of(ref.task_id) != parts[0]:
        raise MlflowRefusal(NOT_FOUND, f"Run {ref.run_id} is not in experiment {parts[0]!r}")
    relative = parts[3] if len(parts) == 4 else ""
    if relative:
        split_relative(relative)  # UnsafePath (400) before anything is opened
    return ArtifactPath(ref, relative)


def list_artifacts(target: ArtifactPath) -> list[dict[str, Any]]:
    """The direct children of a folder of the run, as MLflow lists them (``path``
    relative to the listed folder, ``is_dir``, ``file_size`` for files)."""
    prefix = f"{target.relative}/" if target.relative else ""
    try:
        entries = walk_files(target.ref.folder, single_link=True, limit=MAX_LISTED)
    except (NoSuchFile, UnsafePath):
        return []
    children: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if not entry.relative.startswith(prefix) or entry.relative in RECORD_FILES:
            continue
        rest = entry.relative[len(prefix) :]
        name, below, _ = rest.partition("/")
        if below:
            children.setdefault(name, {"path": name, "is_dir": True})
        else:
            children[name] = {"path": name, "is_dir": False, "file_size": entry.info.st_size}
    return [children[name] for name in sorted(children)]


def open_artifact(target: ArtifactPath) -> OpenedFile:
    if not target.relative:
        raise MlflowRefusal(NOT_FOUND, "An artifact download names a file")
    return open_under(target.ref.folder, target.relative, single_link=True)


async def upload(services: Services, target: ArtifactPath, body: AsyncIterator[bytes]) -> None:
    """Write the request body as the file ``target`` (see the module docstring)."""
    parts = split_relative(target.relative) if target.relative else []
    if not parts:
        raise MlflowRefusal(INVALID, "An artifact upload names a file under the run")
    if len(parts) == 1 and parts[0] in RECORD_FILES:
        raise MlflowRefusal(INVALID, f"{parts[0]} is a record of the run, not an artifact")
    writable_run(services, target.ref)
    folder = await run_in_threadpool(_enter_folders, target.ref, parts[:-1])
    try:
        await _receive(folder, parts[-1], body, services.settings.upload_max_bytes)
    finally:
        os.close(folder)


def _enter_folders(ref: RunRef, names: list[str]) -> int:
    """A descriptor of the folder ``names`` under the run's folder, made where missing,
    never following a symlink."""
    fd = os.open(ref.folder, DIR_FLAGS)
    for name in names:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=fd)
        try:
            child = os.open(name, DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise UnsafePath(name, "not a folder (or a symlink)") from exc
            raise
        os.close(fd)
        fd = child
    return fd


async def _receive(folder: int, name: str, body: AsyncIterator[bytes], limit: int) -> None:
    tmp = f"{TMP_PREFIX}{secrets.token_hex(6)}"
    fd = os.open(tmp, WRITE_FLAGS, 0o644, dir_fd=folder)
    done = False
    try:
        size, pending = 0, bytearray()
        async for chunk in body:
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(f"An artifact may be at most {limit} bytes")
            pending += chunk
            if len(pending) >= FLUSH_BYTES:
                await run_in_threadpool(_write_all, fd, bytes(pending))
                pending.clear()
        await run_in_threadpool(_write_all, fd, bytes(pending))
        await run_in_threadpool(_finish, fd, folder, tmp, name)
        done = True
    finally:
        os.close(fd)
        if not done:
            _unlink(folder, tmp)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _finish(fd: int, folder: int, tmp: str, name: str) -> None:
    os.fsync(fd)
    try:
        os.rename(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except IsADirectoryError as exc:
        raise UnsafePath(name, "a folder of the run has that name") from exc


def _unlink(folder: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=folder)
