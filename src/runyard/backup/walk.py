"""Walking the folders to back up without ever following a symlink.

Folders are opened ``O_DIRECTORY | O_NOFOLLOW`` relative to a descriptor of their parent
and files are opened the same way by the archive writer, so a link planted by a run (in
its ``out/`` or the session's state folder) is neither followed nor archived: it is
listed in the manifest's ``skipped`` with what it was. So are sockets, FIFOs and devices.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from runyard.backup.errors import BackupError
from runyard.backup.manifest import Manifest

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

SkipRule = Callable[[str], str | None]


@dataclass(frozen=True)
class Found:
    """A folder (``fd`` is the folder itself) or a file (``fd`` is its parent folder and
    ``name`` its name there); the descriptor is valid only until the walk moves on."""

    arcname: str
    is_dir: bool
    fd: int
    name: str


def walk(root: Path, prefix: str, skip: SkipRule, manifest: Manifest) -> Iterator[Found]:
    """Everything under ``root`` as archive names ``prefix/...``, sorted, depth first."""
    try:
        fd = os.open(root, DIR_FLAGS)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise BackupError(f"cannot open {root} as a folder: {exc.strerror}") from exc
    try:
        yield Found(prefix, True, fd, "")
        yield from _walk_fd(fd, prefix, skip, manifest)
    finally:
        os.close(fd)


def _walk_fd(fd: int, arcname: str, skip: SkipRule, manifest: Manifest) -> Iterator[Found]:
    with os.scandir(fd) as scan:
        entries = sorted(scan, key=lambda entry: entry.name)
    for entry in entries:
        path = f"{arcname}/{entry.name}"
        reason = skip(path)
        if reason is not None:
            manifest.skip(path, reason)
        elif entry.is_dir(follow_symlinks=False):
            yield from _walk_subdir(fd, entry.name, path, skip, manifest)
        elif entry.is_file(follow_symlinks=False):
            yield Found(path, False, fd, entry.name)
        else:
            manifest.skip(path, kind_of(entry.stat(follow_symlinks=False).st_mode))


def _walk_subdir(
    parent: int, name: str, path: str, skip: SkipRule, manifest: Manifest
) -> Iterator[Found]:
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:  # removed while we walk: it is simply not in this backup
        return
    except OSError as exc:
        manifest.skip(path, f"not readable ({exc.strerror})")
        return
    try:
        yield Found(path, True, fd, name)
        yield from _walk_fd(fd, path, skip, manifest)
    finally:
        os.close(fd)


def kind_of(mode: int) -> str:
    """What a non-regular entry is, for the manifest's ``skipped`` list."""
    kinds = {
        stat.S_IFLNK: "symlink", stat.S_IFSOCK: "socket", stat.S_IFIFO: "fifo",
        stat.S_IFCHR: "character device", stat.S_IFBLK: "block device",
    }  # fmt: skip
    return f"not a regular file or folder ({kinds.get(stat.S_IFMT(mode), 'unknown')})"
