"""Browsing the task folders of a workspace by workspace-relative paths, race-free.

The AxonX workspace jobs (``list_entries``, ``list_task_runs``, ``preview_file``,
``delete_entries``; :mod:`runyard.api.files_jobs`) name paths relative to the workspace
root. Only the task folders are reachable, by an allow-list rather than a list of what to
hide, so runyard's own state stays out whatever it holds now or later:

* ``""`` is the root; it shows only the task type folders (``base``, ``train``, ...);
* ``<type>`` shows the task folders in it (``<type>/<task id>``);
* below a task folder, what the task wrote (its records included);
* nothing else: ``agent/``, ``server.json``, ``server.lock``, every hidden name
  (``.history``, ``.idempotency``, ``.schedules``, ``.pipelines``, ``.taskcache``,
  ``.retrying``, ``.submitters``, ``.index``, ``.sync``, ...) and anything a task hides.

Paths are checked by :func:`runyard.workspace.safefs.split_relative` (no ``..``, no
absolute path, no hidden name) and every folder on the way is opened relative to the
previous one without following a symlink, so a task that swaps a folder for a link while
it is browsed cannot lead a listing or a delete out of its folder::

    where = resolve(workspace, "base/base#demo#a/out", visible)
    with open_folder(workspace.root, where.parts) as fd: ...
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from runyard.errors import NoSuchFile, UnsafePath
from runyard.workspace.identity import TASK_TYPES, is_task_id
from runyard.workspace.layout import Workspace
from runyard.workspace.safefs import DIR_FLAGS, open_root, split_relative

Visible = Callable[[str], bool]  # may the caller see this task id?


@dataclass(frozen=True)
class Where:
    """A checked workspace-relative path: its components and the task it lies in."""

    parts: tuple[str, ...]

    @property
    def relative(self) -> str:
        return "/".join(self.parts)

    @property
    def task_id(self) -> str | None:
        return self.parts[1] if len(self.parts) >= 2 else None


def resolve(path: str, visible: Visible) -> Where:
    """``path`` checked against the allow-list. Raises UnsafePath for a refused name (``..``,
    absolute, hidden, NUL) or one outside the task folders, NoSuchFile for a task the caller
    may not see (answered as a missing one)."""
    if path in ("", "."):
        return Where(())
    parts = tuple(split_relative(path.rstrip("/") if path != "/" else path))
    if parts[0] not in TASK_TYPES:
        raise UnsafePath(path, "only the task folders of the workspace are served")
    if len(parts) >= 2:
        if not parts[1].startswith(f"{parts[0]}#") or not is_task_id(parts[1]):
            raise UnsafePath(path, f"{parts[1]!r} is not a task folder of {parts[0]}")
        if not visible(parts[1]):
            raise NoSuchFile(path, "no such task folder")
    return Where(parts)


@contextmanager
def open_folder(root: Path, parts: tuple[str, ...]) -> Iterator[int]:
    """A descriptor of the folder ``parts`` names under ``root``, each step opened with
    ``O_NOFOLLOW``: a symlink on the way is UnsafePath, a missing folder NoSuchFile."""
    fd = open_root(root)
    try:
        for index, part in enumerate(parts):
            child = _descend(fd, part, "/".join(parts[: index + 1]))
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _descend(folder: int, part: str, so_far: str) -> int:
    try:
        return os.open(part, DIR_FLAGS, dir_fd=folder)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(folder, part):
            raise UnsafePath(so_far, "a symbolic link; links are not followed") from exc
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise NoSuchFile(so_far, "no such folder") from exc
        raise


def _is_link(folder: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False


@dataclass(frozen=True)
class Child:
    name: str
    kind: str  # "directory", "file" or "symlink"
    info: os.stat_result


def children(folder: int, where: Where, visible: Visible) -> Iterator[Child]:
    """What the folder open on ``folder`` shows: never a hidden name; at the root only the
    task type folders, in a type folder only the task folders the caller may see."""
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith(".") or not _allowed(where, entry.name, visible):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone since the folder was read
            kind = _kind(info)
            if kind is not None:
                yield Child(entry.name, kind, info)


def _allowed(where: Where, name: str, visible: Visible) -> bool:
    if not where.parts:
        return name in TASK_TYPES
    if len(where.parts) == 1:
        return name.startswith(f"{where.parts[0]}#") and is_task_id(name) and visible(name)
    return True


def _kind(info: os.stat_result) -> str | None:
    if stat.S_ISLNK(info.st_mode):
        return "symlink"
    if stat.S_ISDIR(info.st_mode):
        return "directory"
    if stat.S_ISREG(info.st_mode):
        return "file"
    return None  # a FIFO, a socket or a device is not shown


def has_file(folder: int, name: str, file: str) -> bool:
    """Whether the child folder ``name`` holds a regular file ``file`` (no link followed)."""
    try:
        child = os.open(name, DIR_FLAGS, dir_fd=folder)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.stat(file, dir_fd=child, follow_symlinks=False).st_mode)
    except OSError:
        return False
    finally:
        os.close(child)


def entry_kind(workspace: Workspace, where: Where) -> str:
    """``"directory"`` or ``"file"`` for what ``where`` names (its folders opened as
    :func:`open_folder` does). UnsafePath for a symlink, NoSuchFile for anything else."""
    with open_folder(workspace.root, where.parts[:-1]) as parent:
        try:
            info = os.stat(where.parts[-1], dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError as exc:
            raise NoSuchFile(where.relative, "no such file or folder") from exc
    kind = _kind(info)
    if kind == "symlink":
        raise UnsafePath(where.relative, "a symbolic link; links are not followed")
    if kind is None:
        raise NoSuchFile(where.relative, "not a regular file or folder")
    return kind


def remove_entry(workspace: Workspace, where: Where) -> str:
    """Delete the file or folder ``where`` names inside a task folder: the parent is opened
    without following links and the entry removed relative to it (``rmtree`` with
    ``dir_fd`` never follows a link). Its kind, as :func:`entry_kind` says."""
    kind = entry_kind(workspace, where)
    with open_folder(workspace.root, where.parts[:-1]) as parent:
        if kind == "directory":
            shutil.rmtree(where.parts[-1], dir_fd=parent)
        else:
            os.unlink(where.parts[-1], dir_fd=parent)
    return kind
