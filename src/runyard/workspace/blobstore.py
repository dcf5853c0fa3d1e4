"""The content-addressed store of kept runs' files: each distinct content once.

::

    <workspace>/.history/.blobs/<sha[:2]>/<sha256>     (read-only, 0444)

A blob's name is the sha256 of the bytes the server itself wrote into it: the content is
copied from the run's file and hashed as it is copied, so a file that changes meanwhile
cannot give a blob a name that is not its content's. Nothing a task writes is trusted to
name a blob. A copy is made under a temp name in the store, synced, and renamed to its
name; an existing blob is never replaced.

Writers (deduplication) and the sweep that removes unreferenced blobs exclude each other
through one ``flock`` on ``.history/.blobs/.lock`` (:func:`store_lock`): a blob stored but
not yet in a manifest is never swept. Readers take no lock: a blob is removed only once no
manifest names it.

    with store_lock(workspace):
        sha, size = store_file(workspace, fd)
    with open_blob(workspace, sha) as opened:
        ...
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Iterator

from runyard.errors import NoSuchFile
from runyard.workspace.layout import Workspace
from runyard.workspace.safefs import DIR_FLAGS, FILE_FLAGS, OpenedFile, closing_fd, make_dirs_at

BLOBS_DIR = ".blobs"  # in .history
LOCK_FILE = ".lock"
TMP_PREFIX = ".tmp-"
SHA_RE = re.compile(r"[0-9a-f]{64}")
CHUNK = 1 << 20


def blobs_root(workspace: Workspace) -> str:
    return os.path.join(workspace.root, ".history", BLOBS_DIR)


def is_sha(value: object) -> bool:
    return isinstance(value, str) and SHA_RE.fullmatch(value) is not None


@contextlib.contextmanager
def store_lock(workspace: Workspace) -> Iterator[None]:
    """Hold the store's exclusive lock (deduplication, sweeping) while the body runs."""
    fd = _store_fd(workspace)
    try:
        lock = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                       dir_fd=fd)  # fmt: skip
    finally:
        os.close(fd)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)


@contextlib.contextmanager
def store_held_if_any(workspace: Workspace) -> Iterator[None]:
    """:func:`store_lock` where the workspace exists (a backup of a missing one holds
    nothing): while it is held no blob is stored or swept, so a copy of the workspace
    taken meanwhile has every blob its manifests name."""
    if not os.path.isdir(workspace.root):
        yield
        return
    with store_lock(workspace):
        yield


def _store_fd(workspace: Workspace) -> int:
    """A descriptor of the store, made when missing, following no symlink on the way."""
    return make_dirs_at(workspace.root, (".history", BLOBS_DIR))


def hash_fd(fd: int) -> tuple[str, int]:
    """The sha256 and size of what ``fd`` reads from its start."""
    digest = hashlib.sha256()
    size = 0
    offset = 0
    while chunk := os.pread(fd, CHUNK, offset):
        digest.update(chunk)
        size += len(chunk)
        offset += len(chunk)
    return digest.hexdigest(), size


def has_blob(workspace: Workspace, sha: str) -> bool:
    try:
        info = os.stat(os.path.join(blobs_root(workspace), sha[:2], sha), follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode)


def store_file(workspace: Workspace, source: int) -> tuple[str, int]:
    """Copy what ``source`` reads into the store; its sha256 and size (the copy's own).

    Call under :func:`store_lock`. An OSError (a full disk) leaves no temp file behind.
    """
    with closing_fd(_store_fd(workspace)) as store:
        tmp = f"{TMP_PREFIX}{secrets.token_hex(8)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=store)  # fmt: skip
        try:
            sha, size = _copy_hashing(source, fd)
            os.fchmod(fd, 0o444)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp, dir_fd=store)
            raise
        os.close(fd)
        _place(store, tmp, sha)
    return sha, size


def _copy_hashing(source: int, target: int) -> tuple[str, int]:
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(source, CHUNK, offset):
        digest.update(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(target, view) :]
        offset += len(chunk)
    return digest.hexdigest(), offset


def _place(store: int, tmp: str, sha: str) -> None:
    """Rename ``tmp`` to its blob name, or drop it when that blob is there already."""
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(sha[:2], 0o700, dir_fd=store)
        with closing_fd(os.open(sha[:2], DIR_FLAGS, dir_fd=store)) as shard:
            try:
                os.stat(sha, dir_fd=shard, follow_symlinks=False)
            except FileNotFoundError:
                os.rename(tmp, sha, src_dir_fd=store, dst_dir_fd=shard)
                os.fsync(shard)
                return
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=store)
        raise
    os.unlink(tmp, dir_fd=store)


def open_blob(workspace: Workspace, sha: str, relative: str) -> OpenedFile:
    """The blob ``sha`` opened for reading (``relative`` is the name it is served as).

    NoSuchFile when there is none, or when what is there is no regular file; the path is
    built from a validated sha alone and no symlink on it is followed.
    """
    if not is_sha(sha):
        raise NoSuchFile(relative, "is not stored")
    try:
        with closing_fd(_shard_fd(workspace, sha)) as shard:
            fd = os.open(sha, FILE_FLAGS, dir_fd=shard)
    except OSError as exc:
        raise NoSuchFile(relative, "is not stored") from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise NoSuchFile(relative, "is not stored")
    return OpenedFile(fd, info, relative)


def _shard_fd(workspace: Workspace, sha: str) -> int:
    with closing_fd(os.open(blobs_root(workspace), DIR_FLAGS)) as store:
        return os.open(sha[:2], DIR_FLAGS, dir_fd=store)


def stored_shas(workspace: Workspace) -> Iterator[tuple[str, int]]:
    """Every blob in the store: its sha and size on disk (bytes of its blocks)."""
    try:
        store = os.open(blobs_root(workspace), DIR_FLAGS)
    except OSError:
        return
    with closing_fd(store):
        for shard in _names(store):
            try:
                shard_fd = os.open(shard, DIR_FLAGS, dir_fd=store)
            except OSError:
                continue  # no folder of ours
            with closing_fd(shard_fd):
                for name in _names(shard_fd):
                    info = os.stat(name, dir_fd=shard_fd, follow_symlinks=False)
                    if is_sha(name) and name[:2] == shard and stat.S_ISREG(info.st_mode):
                        yield name, info.st_blocks * 512


def remove_blob(workspace: Workspace, sha: str) -> bool:
    """Remove the blob ``sha``; whether it was there. Call under :func:`store_lock`."""
    if not is_sha(sha):
        return False
    try:
        with closing_fd(_shard_fd(workspace, sha)) as shard:
            os.unlink(sha, dir_fd=shard)
    except OSError:
        return False
    return True


def _names(fd: int) -> list[str]:
    with os.scandir(fd) as entries:
        return sorted(e.name for e in entries if not e.name.startswith("."))
