"""The index snapshot: a cache of every task folder's records, so a restart reads again only
the folders that changed. Never a source of truth: the files are.

It lives in ``<workspace>/.index/`` (mode 0700, the server's own): ``key`` (32 random
bytes, 0600) and ``snapshot`` (0600)::

    MAGIC  header  chunk...  HMAC-SHA256(key, all before it)

The header carries the formats (:data:`SNAPSHOT_FORMAT`, ``RECORDS_FORMAT`` of
:mod:`runyard.repository.records`, the interpreter's marshal version, the byte order and
width of the arrays) and the workspace it describes (its path, device and inode); each
chunk is the marshal of plain columns: task ids, one stamp per folder, status records,
metadata records; the last chunk, of where the index keeps those entries
(:class:`~runyard.repository.arrangement.Arrangement`: arrays, as bytes). No pickle: loading runs
nothing, and nothing is unmarshalled before the HMAC matched, so a truncated, corrupted,
forged, foreign-version or other-workspace snapshot is refused whole (logged once) and
every folder is read as without one. A symlink, a file or folder of another owner, or one
that others may write is refused the same way.

A folder's stamp is a keyed 64-bit digest of what ``stat`` said, just before its records
were read, of the folder (inode) and of ``status.json`` and ``metadata.json`` (inode, size,
mtime): at start, a folder whose stamp is the same now is taken from the snapshot, any
other is read again. A record modified within :data:`RACY_NS` of the moment it was read
could be written again within the same timestamp tick, unseen by ``stat`` (git's "racy"
entries): its stamp is :data:`RACY`, which matches nothing, so it is always read again.

The file is written whole beside the old one and renamed over it (temp, fsync, rename):
a crash or a full disk leaves the old snapshot or none, never half of one.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import logging
import marshal
import mmap
import os
import secrets
import stat
import struct
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import NamedTuple

from runyard.repository.arrangement import POSITION, Arrangement
from runyard.repository.records import (
    MAX_RECORD_BYTES,
    RECORDS_FORMAT,
    FolderRecords,
    MetadataRecord,
    StatusRecord,
    parse_metadata,
    parse_status,
    shared,
)
from runyard.workspace.atomic import write_chunks_atomic
from runyard.workspace.layout import METADATA_FILE, STATUS_FILE

log = logging.getLogger(__name__)

SNAPSHOT_DIR = ".index"
SNAPSHOT_FILE = "snapshot"
KEY_FILE = "key"
KEY_BYTES = 32
MAGIC = b"runyard index snapshot\n"
SNAPSHOT_FORMAT = 3
RACY = 0
RACY_NS = 2_000_000_000
CHUNK_ENTRIES = 10_000
# snapshot, records, marshal, python major, minor; little-endian, width of a position
_VERSIONS = struct.Struct(">HHHBBBB")
_LENGTH = struct.Struct(">Q")
_MAC_BYTES = sha256().digest_size
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
FileStat = tuple[int, int, int]  # inode, size, mtime_ns
_NONE: FileStat = (0, 0, 0)  # the stat of a record file that is not there


class Columns(NamedTuple):
    """One chunk of entries, column by column (plain lists: marshal takes them as they are)."""

    ids: list[str]
    stamps: list[int]
    statuses: list[StatusRecord | None]
    metadata: list[MetadataRecord | None]


class Refused(Exception):
    """The snapshot cannot be used; the message says why (it is logged once)."""


@dataclass(frozen=True)
class Stamper:
    """Stamps folders with a digest keyed by the snapshot key's first 8 bytes (``salt``),
    as records modified at or after ``racy_from_ns`` are stamped :data:`RACY`."""

    salt: int
    racy_from_ns: int

    def stamp(self, folder_inode: int, status: FileStat, meta: FileStat) -> int:
        if status[2] >= self.racy_from_ns or meta[2] >= self.racy_from_ns:
            return RACY
        return hash((self.salt, folder_inode, *status, *meta)) or 1

    def stamp_now(self, path: str, folder_inode: int) -> int:
        """The stamp of a folder as it is now (two ``lstat``)."""
        return self.stamp(
            folder_inode,
            _lstat(f"{path}/{STATUS_FILE}"),
            _lstat(f"{path}/{METADATA_FILE}"),
        )

    def stamps_now(self, folders: Iterable[tuple[str, int]]) -> list[int]:
        """:meth:`stamp_now` of each ``(path, inode)``, in order: each ``lstat`` is made
        from the folder's parent, opened once for the folders that follow in it (a
        tenth less time than looking the whole path up each time)."""
        found: list[int] = []
        parent, parent_fd = "", -1
        try:
            for path, inode in folders:
                name = path[path.rfind("/") + 1 :]
                folder = path[: len(path) - len(name)] or "."
                if folder != parent:
                    if parent_fd >= 0:
                        os.close(parent_fd)
                    parent, parent_fd = folder, _open_folder(folder)
                if parent_fd < 0:
                    found.append(self.stamp_now(path, inode))
                    continue
                status = _lstat_at(f"{name}/{STATUS_FILE}", parent_fd)
                meta = _lstat_at(f"{name}/{METADATA_FILE}", parent_fd)
                found.append(self.stamp(inode, status, meta))
        finally:
            if parent_fd >= 0:
                os.close(parent_fd)
        return found

    def capture(self, path: str, task_id: str, folder_inode: int) -> tuple[FolderRecords, int]:
        """Read a folder's records the way the index does, stamped with the ``fstat`` of
        each file as it was opened: a write after it changes what ``stat`` says next."""
        status_raw, status_stat = _read_stat(f"{path}/{STATUS_FILE}")
        meta_raw, meta_stat = _read_stat(f"{path}/{METADATA_FILE}")
        parsed_status = parse_status(status_raw, task_id)
        parsed_meta = parse_metadata(meta_raw, task_id)
        status = parsed_status[0] if parsed_status else None
        meta = parsed_meta[0] if parsed_meta else None
        if status is not None and meta is not None:
            meta = shared(meta, status)
        return FolderRecords(True, status, meta), self.stamp(folder_inode, status_stat, meta_stat)


def _lstat(path: str) -> FileStat:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return _NONE
    return info.st_ino, info.st_size, info.st_mtime_ns


def _lstat_at(name: str, dir_fd: int) -> FileStat:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return _NONE
    return info.st_ino, info.st_size, info.st_mtime_ns


def _open_folder(path: str) -> int:
    """A descriptor of the folder (-1 when it cannot be opened): the path looked up as
    ``lstat`` of a path below it would (through a symlink too)."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return -1


def _read_stat(path: str) -> tuple[bytes | None, FileStat]:
    """A regular, non-symlinked record file, whole (None otherwise or when oversized), and
    what ``stat`` said of the file when it was opened."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        return None, _NONE
    except OSError:
        return None, _lstat(path)  # a symlink: its own stat (it changes when replaced)
    try:
        info = os.fstat(fd)
        found = (info.st_ino, info.st_size, info.st_mtime_ns)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_RECORD_BYTES:
            return None, found
        data = os.read(fd, info.st_size + 1)  # one read, unless it grew since the fstat
        return (data if len(data) <= info.st_size else _read_rest(fd, data)), found
    except OSError:
        return None, _NONE
    finally:
        os.close(fd)


def _read_rest(fd: int, start: bytes) -> bytes | None:
    chunks = [start]
    total = len(start)
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
        total += len(chunk)
        if total > MAX_RECORD_BYTES:
            return None
    return b"".join(chunks)


class SnapshotStore:
    """The snapshot folder of one workspace: its key, reading and writing the snapshot."""

    def __init__(self, workspace_root: Path) -> None:
        self.root = Path(os.path.abspath(workspace_root))
        self.folder = self.root / SNAPSHOT_DIR
        self.path = self.folder / SNAPSHOT_FILE

    def key(self, create: bool) -> bytes:
        """The snapshot key (made with its folder when ``create``); :class:`Refused` when
        it is missing, or not the server's own and private."""
        if create:
            self._make_folder()
        dir_fd = _open_private(str(self.folder), _DIR_FLAGS, "the snapshot folder")
        try:
            if create:
                _make_key(dir_fd)
            fd = _open_private(KEY_FILE, _READ_FLAGS, "the snapshot key", dir_fd)
            try:
                key = os.read(fd, KEY_BYTES + 1)
            finally:
                os.close(fd)
        finally:
            os.close(dir_fd)
        if len(key) != KEY_BYTES:
            raise Refused("the snapshot key is not 32 bytes")
        return key

    def sweep(self) -> None:
        """Remove what a write cut short by a crash left (its temp files)."""
        with contextlib.suppress(OSError), os.scandir(self.folder) as entries:
            for entry in entries:
                if entry.name.startswith(f".{SNAPSHOT_FILE}.") and entry.name.endswith(".tmp"):
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)

    def stamper(self, key: bytes, racy_from_ns: int) -> Stamper:
        return Stamper(int.from_bytes(key[:8], "big"), racy_from_ns)

    def load(self, key: bytes) -> Iterator[Columns | Arrangement]:
        """The chunks of the snapshot, once its HMAC, formats and workspace matched
        (:class:`Refused`, before any chunk, otherwise): its columns, then their
        arrangement."""
        dir_fd = _open_private(str(self.folder), _DIR_FLAGS, "the snapshot folder")
        try:
            fd = _open_private(SNAPSHOT_FILE, _READ_FLAGS, "the snapshot", dir_fd)
        finally:
            os.close(dir_fd)
        try:
            size = os.fstat(fd).st_size
            if size <= len(MAGIC) + _MAC_BYTES:
                raise Refused("the snapshot is truncated")
            view = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        return self._chunks(view, key)

    def _chunks(self, view: mmap.mmap, key: bytes) -> Iterator[Columns | Arrangement]:
        try:
            body = memoryview(view)[: len(view) - _MAC_BYTES]
            expected = hmac.new(key, body, sha256).digest()
            if not hmac.compare_digest(expected, view[len(view) - _MAC_BYTES :]):
                raise Refused("the snapshot's HMAC does not match (truncated, corrupted or forged)")
            at = self._check_header(body)
            chunks = self._split(body, at)
        except BaseException:
            body.release()
            view.close()
            raise
        return self._unmarshal(view, body, chunks)

    @staticmethod
    def _unmarshal(
        view: mmap.mmap, body: memoryview, chunks: list[tuple[int, int]]
    ) -> Iterator[Columns | Arrangement]:
        try:
            for start, end in chunks[:-1]:
                yield Columns(*marshal.loads(body[start:end]))
            yield _decoded(*marshal.loads(body[slice(*chunks[-1])]))
        finally:
            body.release()
            view.close()

    def _check_header(self, body: memoryview) -> int:
        if bytes(body[: len(MAGIC)]) != MAGIC:
            raise Refused("not an index snapshot")
        at = len(MAGIC)
        versions = _VERSIONS.unpack_from(body, at)
        if versions != _versions():
            raise Refused(f"the snapshot is of another format {versions}, not {_versions()}")
        at += _VERSIONS.size
        (length,) = _LENGTH.unpack_from(body, at)
        at += _LENGTH.size
        root, device, inode = marshal.loads(body[at : at + length])
        if (root, device, inode) != self._identity():
            raise Refused(f"the snapshot is of another workspace ({root})")
        return at + length

    @staticmethod
    def _split(body: memoryview, at: int) -> list[tuple[int, int]]:
        chunks = []
        while at < len(body):
            (length,) = _LENGTH.unpack_from(body, at)
            at += _LENGTH.size
            chunks.append((at, at + length))
            at += length
        if at != len(body):
            raise Refused("the snapshot's chunks overrun it")
        if not chunks:
            raise Refused("the snapshot has no arrangement")
        return chunks

    def _identity(self) -> tuple[str, int, int]:
        info = os.stat(self.root)
        return str(self.root), info.st_dev, info.st_ino

    def write(
        self, key: bytes, chunks: Iterable[Columns], arrangement: Callable[[], Arrangement]
    ) -> None:
        """Replace the snapshot with ``chunks`` and ``arrangement()`` (called once they are
        all out) (temp, fsync, rename); an OSError (a full disk, say) leaves the old one
        in place."""
        self._make_folder()
        os.close(_open_private(str(self.folder), _DIR_FLAGS, "the snapshot folder"))
        encoded = self._encoded(key, chunks, arrangement)
        write_chunks_atomic(self.path, encoded, mode=0o600, sync_dir=True)

    def _encoded(
        self, key: bytes, chunks: Iterable[Columns], arrangement: Callable[[], Arrangement]
    ) -> Iterator[bytes]:
        mac = hmac.new(key, digestmod=sha256)
        identity = marshal.dumps(self._identity())
        head = MAGIC + _VERSIONS.pack(*_versions()) + _LENGTH.pack(len(identity)) + identity
        mac.update(head)
        yield head
        for columns in chunks:
            yield from _framed(mac, marshal.dumps(tuple(columns)))
        yield from _framed(mac, marshal.dumps(_encoded_arrangement(arrangement())))
        yield mac.digest()

    def _make_folder(self) -> None:
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.folder, 0o700)


def _framed(mac: hmac.HMAC, data: bytes) -> Iterator[bytes]:
    part = _LENGTH.pack(len(data))
    mac.update(part)
    mac.update(data)
    yield part
    yield data


def _encoded_arrangement(arrangement: Arrangement) -> tuple[bytes, list[tuple[str, str, bytes]]]:
    buckets = [(kind, state, ids.tobytes()) for (kind, state), ids in arrangement.buckets.items()]
    return arrangement.order.tobytes(), buckets


def _decoded(order: bytes, buckets: list[tuple[str, str, bytes]]) -> Arrangement:
    return Arrangement(
        _array(POSITION, order),
        {(kind, state): _array(POSITION, ids) for kind, state, ids in buckets},
    )


def _array(typecode: str, data: bytes) -> array[int]:
    found = array(typecode)
    found.frombytes(data)
    return found


def _versions() -> tuple[int, ...]:
    layout = (int(sys.byteorder == "little"), array(POSITION).itemsize)
    return (SNAPSHOT_FORMAT, RECORDS_FORMAT, marshal.version, *sys.version_info[:2], *layout)


def _open_private(path: str, flags: int, what: str, dir_fd: int | None = None) -> int:
    """Open ``path`` (never through a symlink) if the server owns it and no one else may
    write it (nor read it, for a file); :class:`Refused` otherwise."""
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(f"{what} is a symlink") from exc
        raise Refused(f"{what} cannot be opened: {exc.strerror}") from exc
    info = os.fstat(fd)
    directory = stat.S_ISDIR(info.st_mode)
    shared_bits = 0o022 if directory else 0o077
    problem = (
        "is not the server's own" if info.st_uid != os.geteuid()
        else "is open to others" if info.st_mode & shared_bits
        else "is not a regular file" if not directory and not stat.S_ISREG(info.st_mode)
        else None
    )  # fmt: skip
    if problem is not None:
        os.close(fd)
        raise Refused(f"{what} {problem}")
    return fd


def _make_key(dir_fd: int) -> None:
    try:
        fd = os.open(KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                     dir_fd=dir_fd)  # fmt: skip
    except FileExistsError:
        return
    try:
        os.write(fd, secrets.token_bytes(KEY_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
