"""The one helper for durable file writes, and the tolerant JSON read.

Every record write goes through :func:`write_json_atomic`: a temp file in the same folder,
flush, fsync, ``os.replace``. A reader therefore sees the old or the new file, never half.
The one exception is a file of a folder no reader sees yet, one built under a staging name
and renamed into place whole: :func:`write_bytes_new` writes it in place.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(
    path: Path, data: bytes, *, sync_dir: bool = False, fsync: bool = True, mode: int = 0o644
) -> None:
    """Replace ``path`` with ``data`` atomically.

    ``fsync`` makes the content durable before the rename (skip it only for records a
    crash may lose, like intermediate progress); ``sync_dir`` also makes the rename durable.
    ``mode`` is the file's from its creation on, less the umask (0600 for a secret: it
    is never readable by others, not even between creation and rename).
    """
    write_chunks_atomic(path, (data,), sync_dir=sync_dir, fsync=fsync, mode=mode)


def write_bytes_new(path: Path, data: bytes, *, fsync: bool = True, mode: int = 0o644) -> None:
    """Create ``path`` holding ``data``, in place; it must not exist (``FileExistsError``).

    Only for a file of a folder that appears whole later (a staging folder renamed into
    place): no reader can see it half written, so the temp file and rename of
    :func:`write_bytes_atomic` buy nothing. A failed write leaves no file.
    """
    _create(path, (data,), fsync=fsync, mode=mode)


def write_chunks_atomic(
    path: Path,
    chunks: Iterable[bytes],
    *,
    sync_dir: bool = False,
    fsync: bool = True,
    mode: int = 0o644,
) -> None:
    """:func:`write_bytes_atomic` of ``b"".join(chunks)``, written as they come (a large
    file is never whole in memory); an exception from ``chunks`` leaves ``path`` as it was."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    _create(tmp, chunks, fsync=fsync, mode=mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def _create(path: Path, chunks: Iterable[bytes], *, fsync: bool, mode: int) -> None:
    """Create ``path`` (never over a file or through a symlink) holding ``chunks``, fsynced
    if asked; on any error, from the disk or from ``chunks``, no file is left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)


def dump_json(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def write_json_atomic(
    path: Path, obj: Any, *, sync_dir: bool = False, fsync: bool = True, mode: int = 0o644
) -> None:
    write_bytes_atomic(path, dump_json(obj), sync_dir=sync_dir, fsync=fsync, mode=mode)


# O_NONBLOCK: opening a FIFO planted under a record's name must not block forever
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
READ_CHUNK = 1 << 16
ONE_READ_MAX = 1 << 30  # Linux returns at most 2 GiB less a page from one read


def read_bytes_tolerant(
    path: Path | str, *, dir_fd: int | None = None, limit: int | None = None
) -> bytes | None:
    """The file's bytes, or None when it is missing, a symlink, not a regular file or (given
    ``limit``) longer than ``limit`` bytes. ``path`` is relative to ``dir_fd`` when given."""
    try:
        fd = os.open(path, READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (limit is not None and info.st_size > limit):
            return None
        return read_whole(fd, info.st_size, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_whole(fd: int, size: int, limit: int | None = None) -> bytes | None:
    """The rest of the regular file ``fd``, ``size`` bytes long at its ``fstat``: one read
    when it has not grown since (the usual case; four calls for a record, open and close
    included, where a file object takes ten); None once it passes ``limit`` bytes."""
    chunks: list[bytes] = []
    total = 0
    if size < ONE_READ_MAX:
        data = os.read(fd, size + 1)
        if len(data) <= size:  # a regular file's read stops short only at its end
            return data
        chunks.append(data)
        total = len(data)
    while chunk := os.read(fd, READ_CHUNK):  # grown since, or too big for one read
        chunks.append(chunk)
        total += len(chunk)
        if limit is not None and total > limit:
            return None
    return b"".join(chunks)


def read_json_tolerant(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``, or None for anything that is not one."""
    raw = read_bytes_tolerant(path)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # json recurses once a nesting level
        return None
    return data if isinstance(data, dict) else None
