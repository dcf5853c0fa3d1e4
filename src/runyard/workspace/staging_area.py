"""AxonX's upload staging area: one file a request, in ``tmp/<random>/<name>`` under the
workspace root, written without following a link and published by a rename.

An AxonX peer copies a file into the workspace before a job reads it (a sync archive for
``sync_tasks``, a plugin wheel for ``install_plugin``) and discards it afterwards. The
staging area is the workspace's ``tmp/`` folder, which holds nothing of runyard's own: a
directory a peer names must be ``tmp`` or below it, so runyard's state (``agent/``,
``server.json``, ``.idempotency``, ``.history``, the task type folders) is never a
destination. Each upload gets a fresh folder of 32 random hex digits, so nothing is ever
overwritten, as in AxonX.

Every folder on the way is opened relative to the previous one with ``O_NOFOLLOW`` (a
symlink anywhere, ``tmp`` itself included, refuses the upload); the bytes go to a hidden
temp file made with ``O_EXCL`` in the new folder, are flushed to disk, then renamed to
the name asked for. A refusal, a full disk or a cut connection removes the temp file, the
new folder and any folder this upload made: nothing half-written is left::

    upload = StagedUpload.begin(root, "axonx-sync.tar.gz", None, limit=512 << 20)
    try:
        for chunk in chunks:
            upload.write(chunk)
        staged = upload.commit()  # StagedFile("tmp/<hex>/axonx-sync.tar.gz", size)
    finally:
        upload.close()
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from runyard.errors import (
    BodyTooLarge,
    InsufficientStorage,
    NoSuchFile,
    StagedFileRefused,
    UnsafePath,
)
from runyard.faults import fault_point
from runyard.workspace.safefs import DIR_FLAGS, open_root, split_relative
from runyard.workspace.space import is_space_error

COPY_DIR = "tmp"
MAX_FILENAME_CHARS = 200  # AxonX's MAX_FILENAME_LENGTH
# folders of a staged path, ``tmp`` and the file included: a peer names one or two; a tree
# thousands deep would outlive recursive tools (``shutil.rmtree`` recurses a level a call)
MAX_DEPTH = 16
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class StagedFile:
    """AxonX's ``FileCopy``: the workspace-relative ``path`` and ``size`` in bytes."""

    path: str
    size: int


def check_filename(filename: str) -> str:
    """A plain file name (AxonX's rules, and not hidden); StagedFileRefused otherwise."""
    if not filename.strip():
        raise StagedFileRefused("Upload filename must be a non-empty string")
    if len(filename) > MAX_FILENAME_CHARS:
        raise StagedFileRefused(f"Upload filename exceeds {MAX_FILENAME_CHARS} characters")
    try:
        parts = split_relative(filename)
    except UnsafePath as exc:
        raise StagedFileRefused(f"Invalid upload filename {filename!r}: {exc.reason}") from exc
    if len(parts) != 1:
        raise StagedFileRefused(f"Invalid upload filename {filename!r}: a name, not a path")
    return filename


def copy_parts(relative: str | None, *, file: bool = False) -> list[str]:
    """The components of a path in the staging area (``tmp`` when None); StagedFileRefused
    for one outside it, ``..``, absolute, hidden or NUL (and for ``tmp`` itself when
    ``file``: it is a folder of copies, not a copy)."""
    where = COPY_DIR if relative is None else relative.strip().rstrip("/")
    try:
        parts = split_relative(where)
    except UnsafePath as exc:
        raise StagedFileRefused(f"{exc}") from exc
    if parts[0] != COPY_DIR or (file and len(parts) == 1):
        what = "Staged files" if file else "Uploads"
        raise StagedFileRefused(
            f"{what} are confined to the workspace {COPY_DIR!r} directory: {where[:200]!r}"
        )
    if len(parts) + (0 if file else 2) > MAX_DEPTH:
        raise StagedFileRefused(
            f"A staged path has at most {MAX_DEPTH} components: {where[:200]!r}"
        )
    return parts


@dataclass
class StagedUpload:
    """One upload being written (see the module docstring); ``close`` always runs."""

    limit: int
    name: str
    relative: str
    made: list[tuple[int, str]]  # the folders this upload made: (its parent's fd, name)
    folder: int  # the upload's own folder
    temp: str
    out: int
    size: int = 0
    done: bool = field(default=False)

    @classmethod
    def begin(cls, root: Path, filename: str, directory: str | None, limit: int) -> StagedUpload:
        """Check the name and directory, make ``<directory>/<random>/`` and the temp file."""
        name = check_filename(filename)
        parts = copy_parts(directory)
        made: list[tuple[int, str]] = []
        try:
            parent = _descend(open_root(root), parts, made)
            token = secrets.token_hex(16)
            try:
                own = _make_folder(parent, token, made)
            finally:
                os.close(parent)
            temp = f".{name[:64]}.{secrets.token_hex(4)}.part"
            try:
                out = os.open(temp, CREATE_FLAGS, 0o644, dir_fd=own)
            except OSError as exc:
                os.close(own)
                raise _write_error(exc) from exc
        except BaseException:
            _remove_made(made)
            raise
        return cls(limit, name, "/".join([*parts, token, name]), made, own, temp, out)

    def write(self, chunk: bytes) -> None:
        """Append ``chunk``; BodyTooLarge past ``limit`` bytes, InsufficientStorage on a full
        disk (the caller's ``close`` then removes everything)."""
        self.size += len(chunk)
        if self.size > self.limit:
            raise too_large(self.limit)
        view = memoryview(chunk)
        try:
            fault_point("files.write")
            while view:
                view = view[os.write(self.out, view) :]
        except OSError as exc:
            raise _write_error(exc) from exc

    def commit(self) -> StagedFile:
        """Flush to disk, then publish under the name asked for."""
        try:
            os.fsync(self.out)
            os.rename(self.temp, self.name, src_dir_fd=self.folder, dst_dir_fd=self.folder)
            os.fsync(self.folder)
        except OSError as exc:
            raise _write_error(exc) from exc
        self.done = True
        return StagedFile(self.relative, self.size)

    def close(self) -> None:
        """Release the descriptors; without a commit, remove all this upload made."""
        os.close(self.out)
        if not self.done:
            with contextlib.suppress(OSError):
                os.unlink(self.temp, dir_fd=self.folder)
        os.close(self.folder)
        if self.done:
            _close_all(self.made)
        else:
            _remove_made(self.made)


def too_large(limit: int) -> BodyTooLarge:
    return BodyTooLarge(
        f"Upload exceeds the configured limit of {limit} bytes (files_max_upload_mb); "
        "nothing was kept"
    )


def discard(root: Path, relative: str) -> str:
    """Remove the staged file at ``relative`` (gone already is fine) and the folders that
    held it while empty, down to ``tmp``; answers the path. A link on the way or a folder
    at the path refuses it (a staged path names one file)."""
    parts = copy_parts(relative, file=True)
    shown = "/".join(parts)
    try:
        folder = _descend(open_root(root), parts[:-1], None)
    except NoSuchFile:
        return shown  # a folder on the way is gone: so is the file
    try:
        _unlink_file(folder, parts[-1], shown)
    finally:
        os.close(folder)
    _remove_empty(root, parts[:-1])
    return shown


def _unlink_file(folder: int, name: str, shown: str) -> None:
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise StagedFileRefused(f"Staged path is not a file: {shown!r}")
    os.unlink(name, dir_fd=folder)


def _remove_empty(root: Path, parts: list[str]) -> None:
    """rmdir the folders of ``parts`` from the deepest up while empty, ``tmp`` kept."""
    while len(parts) > 1:
        try:
            parent = _descend(open_root(root), parts[:-1], None)
        except (NoSuchFile, StagedFileRefused):
            return
        try:
            os.rmdir(parts[-1], dir_fd=parent)
        except OSError:
            return  # not empty (or gone): the folders above stay
        finally:
            os.close(parent)
        parts = parts[:-1]


def _descend(fd: int, parts: list[str], made: list[tuple[int, str]] | None) -> int:
    """The folder ``parts`` names under ``fd`` (consumed), opened without following a link;
    with ``made``, missing folders are made and recorded there. NoSuchFile for a missing
    one otherwise, StagedFileRefused for a link or a file on the way."""
    try:
        for index, part in enumerate(parts):
            if made is not None:
                child = _make_folder(fd, part, made, exist_ok=True)
            else:
                child = _open_folder(fd, part, "/".join(parts[: index + 1]))
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _make_folder(
    parent: int, name: str, made: list[tuple[int, str]], exist_ok: bool = False
) -> int:
    try:
        os.mkdir(name, 0o755, dir_fd=parent)
        made.append((os.dup(parent), name))
    except FileExistsError:
        if not exist_ok:
            raise
    except OSError as exc:
        raise _write_error(exc) from exc
    return _open_folder(parent, name, name)


def _open_folder(parent: int, name: str, shown: str) -> int:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError as exc:
        raise NoSuchFile(shown, "no such folder") from exc
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise StagedFileRefused(
                f"Unsafe path {shown[:200]!r}: a symbolic link or a file where a folder is "
                "needed; links are not followed"
            ) from exc
        raise _write_error(exc) from exc


def _remove_made(made: list[tuple[int, str]]) -> None:
    """rmdir the folders an upload made, the deepest first, only while empty."""
    for parent, name in reversed(made):
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=parent)
    _close_all(made)


def _close_all(made: list[tuple[int, str]]) -> None:
    for parent, _ in made:
        os.close(parent)
    made.clear()


def _write_error(exc: OSError) -> Exception:
    if is_space_error(exc):
        return InsufficientStorage(
            f"Not enough disk space to stage the upload ({exc.strerror}); nothing was kept"
        )
    return exc


def sweep_partial_uploads(root: Path, before: float) -> list[str]:
    """Remove the temp files of uploads a crash cut short (``.<name>.<hex>.part`` under
    ``tmp/``) last written before ``before`` (the server's start: an upload this server
    is receiving is newer), and their upload folders once empty; their paths. Walked
    without following a link, never deeper than :data:`MAX_DEPTH`."""
    try:
        top = _descend(open_root(root), [COPY_DIR], None)
    except (NoSuchFile, StagedFileRefused, UnsafePath):
        return []
    removed: list[str] = []
    try:
        for folder, dirs, files, fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            if folder.count("/") >= MAX_DEPTH:
                dirs.clear()  # no deeper: no upload is made there
            for name in files:
                if _stale_part(fd, name, before):
                    os.unlink(name, dir_fd=fd)
                    removed.append(f"{COPY_DIR}/{folder[2:]}/{name}".replace("//", "/"))
    finally:
        os.close(top)
    for path in removed:
        _remove_empty(root, path.split("/")[:-1])
    return removed


def _stale_part(folder: int, name: str, before: float) -> bool:
    if not (name.startswith(".") and name.endswith(".part")):
        return False
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_mtime < before
