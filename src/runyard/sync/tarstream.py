"""One task as a tar stream, produced chunk by chunk: memory stays flat at any size.

A task's folder was writable by the task, and its ``status.json`` is the task's to rewrite:
nothing in it decides what is read. What is sent is what the server derives from the two
ids, each validated as one path component:

- ``task/<path>`` for every plain file and folder of the task's folder
  (``workspace.task_dir(task_id)``), found by a walk that opens each folder relative to
  its parent with ``O_NOFOLLOW`` and never follows a symlink; hidden names are the
  server's own bookkeeping and stay home; FIFOs, sockets and devices are left out;
- ``log``, the run's log at ``workspace.run_log_path(task_id, run_id)`` — never the
  ``log_path`` a status names — opened the same way and only as a regular file with one
  link;
- ``runs/<run_id>/files/<path>`` and ``runs/<run_id>/log``, the task's kept earlier runs
  (:mod:`runyard.sync.keptruns`).

Each file is opened once, relative to its folder, and sent from that descriptor only when
its ``(st_dev, st_ino)`` is the one the walk listed: a file swapped for another (or for a
link) since is not sent. A folder that breaks the receiver's rules
(:mod:`runyard.sync.members`: names, depth, count) raises :class:`UnsendableTask` before
the first byte, so a push reports that task refused and goes on. Headers are PAX (long
task ids fit); file bodies are read in 1 MiB chunks straight into the stream::

    for chunk in task_tar_stream(workspace, status):
        send(chunk)
"""

from __future__ import annotations

import os
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from runyard.errors import InvalidInput, UnsafePath
from runyard.sync.errors import UnsendableTask
from runyard.sync.keptruns import Member, kept_run_members
from runyard.sync.members import (
    BLOCK,
    CHUNK,
    LOG_MEMBER,
    MAX_MEMBERS,
    TASK_PREFIX,
    check_parts,
)
from runyard.workspace.identity import parse_task_id, validate_run_id
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskStatus
from runyard.workspace.safefs import DIR_FLAGS, open_root, open_under

Identity = tuple[int, int]  # (st_dev, st_ino)


@dataclass(frozen=True)
class Entry:
    """A plain file or folder the walk found: its path in the task folder and identity."""

    relative: str
    directory: bool
    identity: Identity
    mtime: int


def task_tar_stream(workspace: Workspace, status: TaskStatus) -> Iterator[bytes]:
    """The tar of ``status``'s task folder and run log (see the module docstring).

    The folder is walked now (:class:`UnsendableTask` when it cannot be sent); the bytes
    are produced as the returned iterator is read."""
    try:
        task_id = str(parse_task_id(status.task_id))
        run_id = validate_run_id(status.run_id)
    except InvalidInput as exc:
        raise UnsendableTask(str(status.task_id)[:200], str(exc)) from exc
    task_dir = workspace.task_dir(task_id)
    entries = scan_task_folder(task_id, task_dir)
    log_rel = workspace.run_log_path(task_id, run_id).relative_to(workspace.log_dir)
    kept = kept_run_members(workspace, task_id, run_id)
    return _stream(task_dir, entries, workspace.log_dir, str(log_rel), kept)


def scan_task_folder(task_id: str, task_dir: Path) -> list[Entry]:
    """Every visible plain file and folder under ``task_dir``, folders before what they
    hold, without following a symlink; :class:`UnsendableTask` for a folder the receiver
    would refuse (a name breaking its rules, deeper than MAX_DEPTH, over MAX_MEMBERS)."""
    try:
        root = open_root(task_dir)
    except (OSError, UnsafePath) as exc:
        raise UnsendableTask(task_id, f"its folder cannot be read: {exc}") from exc
    try:
        found: list[Entry] = []
        pending: list[tuple[str, Identity | None]] = [("", None)]
        while pending:
            prefix, identity = pending.pop()
            listed = _list_folder(task_id, root, prefix, identity)
            found.extend(listed)
            if len(found) > MAX_MEMBERS:
                raise UnsendableTask(task_id, f"it holds more than {MAX_MEMBERS} files")
            subfolders = [(e.relative + "/", e.identity) for e in listed if e.directory]
            pending.extend(reversed(subfolders))
        return found
    finally:
        os.close(root)


def _list_folder(task_id: str, root: int, prefix: str, identity: Identity | None) -> list[Entry]:
    """The visible files and folders directly in ``prefix`` (``""``: the task folder),
    sorted; nothing when the folder is no longer the one listed (``identity``)."""
    folder = _open_folder(root, prefix, identity)
    if folder is None:
        return []
    try:
        names = sorted(os.listdir(folder))
        return [e for name in names if (e := _entry(task_id, folder, prefix, name))]
    finally:
        if folder != root:
            os.close(folder)


def _open_folder(root: int, prefix: str, identity: Identity | None) -> int | None:
    if not prefix:
        return root
    folder = root
    try:
        for part in prefix.rstrip("/").split("/"):
            child = os.open(part, DIR_FLAGS, dir_fd=folder)
            if folder != root:
                os.close(folder)
            folder = child
        info = os.fstat(folder)
    except OSError:  # gone, or a link put in its place since it was listed
        if folder != root:
            os.close(folder)
        return None
    if (info.st_dev, info.st_ino) != identity:
        os.close(folder)
        return None
    return folder


def _entry(task_id: str, folder: int, prefix: str, name: str) -> Entry | None:
    if name.startswith("."):
        return None
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError:
        return None  # gone since the folder was read
    directory = stat.S_ISDIR(info.st_mode)
    if not (directory or stat.S_ISREG(info.st_mode)):
        return None  # a symlink, FIFO, socket or device
    relative = prefix + name
    try:
        check_parts(relative)  # deeper than MAX_DEPTH ends the walk here
    except UnsafePath as exc:
        raise UnsendableTask(task_id, f"a receiver would refuse it: {exc}") from exc
    return Entry(relative, directory, (info.st_dev, info.st_ino), int(info.st_mtime))


def _stream(
    task_dir: Path, entries: list[Entry], log_dir: Path, log_rel: str, kept: Iterator[Member]
) -> Iterator[bytes]:
    for entry in entries:
        name = TASK_PREFIX + entry.relative
        if entry.directory:
            yield _header(name, 0, entry.mtime, directory=True)
        else:
            yield from _file_member(name, task_dir, entry.relative, entry.identity)
    yield from _file_member(LOG_MEMBER, log_dir, log_rel, None, single_link=True)
    for name, opened in kept:  # the kept earlier runs (runyard.sync.keptruns)
        with opened:
            yield _header(name, opened.size, int(opened.info.st_mtime))
            yield from _body(opened.fd, opened.size)
    yield bytes(2 * BLOCK)


def _header(name: str, size: int, mtime: int, *, directory: bool = False) -> bytes:
    member = tarfile.TarInfo(name)
    member.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    member.size = 0 if directory else size
    member.mode = 0o755 if directory else 0o644
    member.mtime = mtime
    return member.tobuf(format=tarfile.PAX_FORMAT)


def _file_member(
    name: str,
    root: Path,
    relative: str,
    identity: Identity | None,
    *,
    single_link: bool = False,
) -> Iterator[bytes]:
    """Header and body of one regular file, opened once under ``root`` without following
    a link; nothing when it is missing, not regular, or (given ``identity``) not the file
    listed. A file that changes size mid-read is cut or padded to the size in its header,
    so the stream stays well-formed (the receiver's hash check then refuses it)."""
    try:
        opened = open_under(root, relative, single_link=single_link)
    except (OSError, UnsafePath):
        return
    with opened:
        info = opened.info
        if identity is not None and (info.st_dev, info.st_ino) != identity:
            return
        yield _header(name, info.st_size, int(info.st_mtime))
        yield from _body(opened.fd, info.st_size)


def _body(fd: int, size: int) -> Iterator[bytes]:
    left = size
    while left > 0:
        chunk = os.read(fd, min(CHUNK, left)) or bytes(min(CHUNK, left))
        yield chunk
        left -= len(chunk)
    pad = -size % BLOCK
    if pad:
        yield bytes(pad)
