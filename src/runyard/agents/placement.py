"""Placing an uploaded file into a run's ``in/`` without letting the run change the upload.

In order of preference:

* ``reflink`` — a copy-on-write clone (btrfs, XFS, bcachefs): instant, and a write by the
  run only changes its own copy.
* ``hardlink`` — instant, but the run would write through it into the upload; used only
  when the caller says the file will be read-only inside the run (the sandbox binds each
  hard-linked input read-only over itself).
* ``copy`` — always safe, costs the bytes (``copy_file_range``/``sendfile`` in the kernel).

Nothing under ``root`` (the run's ``in/``, by default the deepest folder of ``dst`` that
already exists) is looked up by name twice or through a symlink: each missing folder is
made and opened relative to its parent (``O_NOFOLLOW``), the file is created ``O_EXCL``
in the last one, and ownership and mode are set on the descriptors.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from runyard.agents.errors import AgentConflict
from runyard.agents.layout import INPUT_FILE_MODE, Ownership, open_folder

FICLONE = 0x40049409  # _IOW(0x94, 9, int) from linux/fs.h
NO_CLONE = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EPERM}


CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
SOURCE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


def reflink(src: Path, dst: Path) -> bool:
    """Clone ``src`` to the new file ``dst``; False (and no ``dst``) where unsupported."""
    folder = open_folder(dst.parent)
    try:
        fd = _clone_at(src, folder, dst.name)
    finally:
        os.close(folder)
    if fd is None:
        return False
    os.close(fd)
    return True


def _clone_at(src: Path, folder: int, name: str) -> int | None:
    """The new file ``name`` in ``folder``, cloned from ``src`` and left open; None (and no
    file) where cloning is not supported."""
    src_fd = os.open(src, SOURCE_FLAGS)
    try:
        fd = os.open(name, CREATE_FLAGS, INPUT_FILE_MODE, dir_fd=folder)
        try:
            fcntl.ioctl(fd, FICLONE, src_fd)
        except OSError as exc:
            os.close(fd)
            os.unlink(name, dir_fd=folder)
            if exc.errno in NO_CLONE:
                return None
            raise
        return fd
    finally:
        os.close(src_fd)


def hardlink(src: Path, folder: int, name: str) -> bool:
    try:
        os.link(src, name, dst_dir_fd=folder, follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EOPNOTSUPP):
            return False
        raise
    return True


def _copy_at(src: Path, folder: int, name: str) -> int:
    """Copy in the kernel (``copy_file_range``, else ``sendfile``) into the new file ``name``
    in ``folder``; answers its descriptor, still open."""
    src_fd = os.open(src, SOURCE_FLAGS)
    try:
        dst_fd = os.open(name, CREATE_FLAGS, INPUT_FILE_MODE, dir_fd=folder)
        try:
            _copy_fds(src_fd, dst_fd, os.fstat(src_fd).st_size)
        except BaseException:
            os.close(dst_fd)
            raise
        return dst_fd
    finally:
        os.close(src_fd)


def _copy_fds(src_fd: int, dst_fd: int, size: int) -> None:
    offset = 0
    while offset < size:
        try:
            sent = os.copy_file_range(src_fd, dst_fd, size - offset)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            sent = os.sendfile(dst_fd, src_fd, None, size - offset)
        if sent == 0:
            break
        offset += sent


def place_input(
    src: Path, dst: Path, *, read_only_inside: bool, owner: Ownership, root: Path | None = None
) -> str:
    """Put ``src`` at ``dst`` (its folders under ``root`` created, none followed through a
    symlink); returns ``reflink|hardlink|copy``."""
    root = _existing_root(dst) if root is None else root
    parts = dst.relative_to(root).parts
    folder = _open_parents(root, parts[:-1], owner)
    try:
        return _place_at(src, folder, parts[-1], read_only_inside, owner)
    finally:
        os.close(folder)


def _place_at(src: Path, folder: int, name: str, read_only_inside: bool, owner: Ownership) -> str:
    fd = _clone_at(src, folder, name)
    how = "reflink"
    if fd is None:
        if read_only_inside and hardlink(src, folder, name):
            return "hardlink"
        fd, how = _copy_at(src, folder, name), "copy"
    try:
        owner.apply_fd(fd, INPUT_FILE_MODE)
    finally:
        os.close(fd)
    return how


def _existing_root(dst: Path) -> Path:
    root = dst.parent
    while not root.exists():
        root = root.parent
    return root


def _open_parents(root: Path, names: tuple[str, ...], owner: Ownership) -> int:
    """A descriptor of ``root/names...``, each missing folder made with the run's ownership."""
    folder = open_folder(root)
    for name in names:
        try:
            child = owner.make_dir_at(folder, name)
        except OSError as exc:
            os.close(folder)
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise AgentConflict(f"in/ holds a non-folder where {name} should be") from exc
            raise
        os.close(folder)
        folder = child
    return folder
