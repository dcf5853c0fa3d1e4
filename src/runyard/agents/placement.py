"""Placing an uploaded file into a run's ``in/`` without letting the run change the upload.

In order of preference:

* ``reflink`` — a copy-on-write clone (btrfs, XFS, bcachefs): instant, and a write by the
  run only changes its own copy.
* ``hardlink`` — instant, but the run would write through it into the upload; used only
  when the caller says the file will be read-only inside the run (the sandbox binds each
  hard-linked input read-only over itself).
* ``copy`` — always safe, costs the bytes (``copy_file_range``/``sendfile`` in the kernel).
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from runyard.agents.layout import INPUT_FILE_MODE, Ownership

FICLONE = 0x40049409  # _IOW(0x94, 9, int) from linux/fs.h
NO_CLONE = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EPERM}


def reflink(src: Path, dst: Path) -> bool:
    """Clone ``src`` to the new file ``dst``; False (and no ``dst``) where unsupported."""
    with open(src, "rb") as source:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, INPUT_FILE_MODE)
        try:
            fcntl.ioctl(fd, FICLONE, source.fileno())
        except OSError as exc:
            os.close(fd)
            dst.unlink(missing_ok=True)
            if exc.errno in NO_CLONE:
                return False
            raise
        os.close(fd)
    return True


def hardlink(src: Path, dst: Path) -> bool:
    try:
        os.link(src, dst)
    except OSError as exc:
        if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EOPNOTSUPP):
            return False
        raise
    return True


def copy(src: Path, dst: Path) -> None:
    """Copy in the kernel (``copy_file_range``, else ``sendfile``) into the new file ``dst``."""
    src_fd = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        dst_fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, INPUT_FILE_MODE)
        try:
            _copy_fds(src_fd, dst_fd, os.fstat(src_fd).st_size)
        finally:
            os.close(dst_fd)
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


def place_input(src: Path, dst: Path, *, read_only_inside: bool, owner: Ownership) -> str:
    """Put ``src`` at ``dst`` (its folders created); returns ``reflink|hardlink|copy``."""
    _make_parents(dst, owner)
    if reflink(src, dst):
        owner.apply(dst, INPUT_FILE_MODE)
        return "reflink"
    if read_only_inside and hardlink(src, dst):
        return "hardlink"
    copy(src, dst)
    owner.apply(dst, INPUT_FILE_MODE)
    return "copy"


def _make_parents(dst: Path, owner: Ownership) -> None:
    missing = []
    parent = dst.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for folder in reversed(missing):
        owner.make_dir(folder)
