"""One task as a tar stream, produced chunk by chunk: memory stays flat at any size.

Members: ``task/<path>`` for every plain file and folder of the task folder (hidden
names are the server's own bookkeeping and stay home), then ``log`` for the run log.
Headers are PAX (long task ids fit); file bodies are read in 1 MiB chunks straight into
the stream, so a 1 GiB artifact never sits in memory::

    for chunk in task_tar_stream(workspace, status):
        send(chunk)
"""

from __future__ import annotations

import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskStatus

CHUNK = 1 << 20
BLOCK = tarfile.BLOCKSIZE
TASK_PREFIX = "task/"
LOG_MEMBER = "log"


def _header(name: str, info: os.stat_result | None, size: int, directory: bool) -> bytes:
    member = tarfile.TarInfo(name)
    member.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    member.size = 0 if directory else size
    member.mode = 0o755 if directory else 0o644
    member.mtime = int(info.st_mtime) if info is not None else 0
    return member.tobuf(format=tarfile.PAX_FORMAT)


def _file_member(name: str, path: Path) -> Iterator[bytes]:
    """Header and body of one regular file; a file that changes size mid-read is cut or
    padded to the size in its header, so the stream stays well-formed (the receiver's
    hash check then refuses it)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            return
        yield _header(name, info, info.st_size, False)
        left = info.st_size
        while left > 0:
            chunk = fh.read(min(CHUNK, left))
            if not chunk:
                chunk = bytes(min(CHUNK, left))
            yield chunk
            left -= len(chunk)
        pad = -info.st_size % BLOCK
        if pad:
            yield bytes(pad)


def _walk(task_dir: Path) -> Iterator[tuple[str, Path, bool]]:
    """``(relative name, path, is_dir)`` of every visible plain file and folder, sorted."""
    stack = [(task_dir, "")]
    while stack:
        folder, prefix = stack.pop()
        with os.scandir(folder) as entries:
            items = sorted(entries, key=lambda e: e.name)
        for entry in items:
            if entry.name.startswith("."):
                continue
            rel = prefix + entry.name
            if entry.is_dir(follow_symlinks=False):
                yield rel, Path(entry.path), True
                stack.append((Path(entry.path), rel + "/"))
            elif entry.is_file(follow_symlinks=False):
                yield rel, Path(entry.path), False


def task_tar_stream(workspace: Workspace, status: TaskStatus) -> Iterator[bytes]:
    """The tar of ``status``'s folder and run log (see the module docstring)."""
    task_dir = workspace.task_dir(status.task_id)
    for rel, path, is_dir in _walk(task_dir):
        if is_dir:
            yield _header(TASK_PREFIX + rel, None, 0, True)
        else:
            yield from _file_member(TASK_PREFIX + rel, path)
    log_path = _log_path(workspace, status)
    if log_path is not None:
        yield from _file_member(LOG_MEMBER, log_path)
    yield bytes(2 * BLOCK)


def _log_path(workspace: Workspace, status: TaskStatus) -> Path | None:
    path = Path(status.log_path) if status.log_path else None
    if path is None or not path.is_file():
        path = workspace.run_log_path(status.task_id, status.run_id)
    return path if path.is_file() and not path.is_symlink() else None
