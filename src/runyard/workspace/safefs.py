"""Opening and listing files under a folder that someone else can write, race-free.

Checking a path (``realpath``, ``is_file``) and then opening it again by name loses to
anyone who can swap the name in between: a symlink put in place of the checked file makes
the server read whatever the link names. Here nothing is ever looked up twice:

* the root is opened with ``O_DIRECTORY | O_NOFOLLOW`` (a symlinked root is refused);
* each folder on the way is opened relative to the previous one, ``O_NOFOLLOW`` again;
* the file itself is opened ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO cannot hang the open);
* ``fstat`` on the descriptor decides: a regular file, and with ``single_link`` one with
  no other hard link (a link to a file the writer could not read itself is still a link);
* the caller reads from the descriptor and never opens the path again.

::

    with open_under(task_dir, "out/report.csv") as opened:
        first = os.pread(opened.fd, 100, 0)

Listing walks with :func:`os.fwalk` without following symlinks, and reports only what
:func:`open_under` would serve.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from runyard.errors import NoSuchFile, UnsafePath

# the reason of a NoSuchFile for a name that is not there (missing, or under a file)
MISSING = "does not exist or is not a folder where one is needed"
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4096
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@contextlib.contextmanager
def closing_fd(fd: int) -> Iterator[int]:
    """``with closing_fd(os.open(...)) as fd:``: the descriptor, closed on leaving."""
    try:
        yield fd
    finally:
        os.close(fd)


def make_dirs_at(root: Path, parts: Sequence[str], mode: int = 0o700) -> int:
    """A descriptor of ``root/parts...``, each folder made when missing and opened relative
    to the one before it, following no symlink on the way (the caller closes it)."""
    fd = os.open(root, DIR_FLAGS)
    for part in parts:
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, mode, dir_fd=fd)
        try:
            child = os.open(part, DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = child
    return fd


def visible_dirs(folder: Path) -> list[str]:
    """The names of ``folder``'s sub-folders (not links to one, not hidden), sorted; ``[]``
    when it cannot be listed."""
    try:
        with os.scandir(folder) as entries:
            return sorted(
                e.name
                for e in entries
                if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)
            )
    except OSError:
        return []


@dataclass
class OpenedFile:
    """A regular file opened for reading; the holder closes it (or uses ``with``)."""

    fd: int
    info: os.stat_result
    relative: str
    closed: bool = field(default=False, init=False)

    @property
    def name(self) -> str:
        return self.relative.rsplit("/", 1)[-1]

    @property
    def size(self) -> int:
        return self.info.st_size

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)

    def __enter__(self) -> OpenedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # a response that was built but never sent must not leak its descriptor
        self.close()


@dataclass(frozen=True)
class FileEntry:
    relative: str
    info: os.stat_result


def split_relative(relative: str, *, hidden: bool = False) -> list[str]:
    """The components of a relative path, or :class:`UnsafePath` saying which rule it broke.

    Refused: absolute paths, empty, ``.`` and ``..`` components, NUL and backslash, names
    over 255 bytes, and (unless ``hidden``) names starting with a dot.
    """
    if not relative:
        raise UnsafePath(relative, "names no file")
    if "\x00" in relative or "\\" in relative:
        raise UnsafePath(relative, "NUL and backslash are not allowed")
    if relative.startswith("/"):
        raise UnsafePath(relative, "must be relative to its folder")
    if len(os.fsencode(relative)) > MAX_PATH_BYTES:
        raise UnsafePath(relative[:64] + "...", f"longer than {MAX_PATH_BYTES} bytes")
    parts = relative.split("/")
    for part in parts:
        _check_component(relative, part, hidden)
    return parts


def _check_component(relative: str, part: str, hidden: bool) -> None:
    if part in ("", ".", ".."):
        raise UnsafePath(relative, "empty, '.' and '..' components are not allowed")
    if len(os.fsencode(part)) > MAX_NAME_BYTES:
        raise UnsafePath(relative[:64] + "...", f"a name is longer than {MAX_NAME_BYTES} bytes")
    if part.startswith(".") and not hidden:
        raise UnsafePath(relative, "hidden files are not served")


def open_root(root: Path) -> int:
    """A descriptor of the folder ``root`` itself, refused when ``root`` is a symlink."""
    try:
        return os.open(root, DIR_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ENOTDIR and _is_symlink(None, root):
            exc.errno = errno.ELOOP
        raise _translate(exc, root.name, "the folder") from exc  # no host path in answers


def open_under(
    root: Path, relative: str, *, hidden: bool = False, single_link: bool = False
) -> OpenedFile:
    """Open the regular file ``relative`` names under ``root`` without following a symlink.

    Raises :class:`UnsafePath` for a refused name, a symlink on the way or (with
    ``single_link``) a hard-linked file; :class:`NoSuchFile` when there is no regular file.
    """
    parts = split_relative(relative, hidden=hidden)
    folder = open_root(root)
    try:
        for index, part in enumerate(parts[:-1]):
            child = _descend(folder, part, "/".join(parts[: index + 1]))
            os.close(folder)
            folder = child
        fd = _open_leaf(folder, parts[-1], relative)
    finally:
        os.close(folder)
    try:
        info = os.fstat(fd)
        _check_leaf(info, relative, single_link)
    except BaseException:
        os.close(fd)
        raise
    return OpenedFile(fd, info, relative)


def _descend(folder: int, part: str, so_far: str) -> int:
    try:
        return os.open(part, DIR_FLAGS, dir_fd=folder)
    except OSError as exc:
        if exc.errno == errno.ENOTDIR and _is_symlink(folder, part):
            exc.errno = errno.ELOOP  # O_DIRECTORY answers ENOTDIR for a symlink too
        raise _translate(exc, so_far, "a folder") from exc


def _is_symlink(folder: int | None, name: str | Path) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_leaf(folder: int, name: str, relative: str) -> int:
    try:
        return os.open(name, FILE_FLAGS, dir_fd=folder)
    except OSError as exc:
        raise _translate(exc, relative, "the file") from exc


def _check_leaf(info: os.stat_result, relative: str, single_link: bool) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise NoSuchFile(relative, "not a regular file")
    if single_link and info.st_nlink > 1:
        links = info.st_nlink
        raise UnsafePath(relative, f"has {links} hard links; a file with other links is not served")


def _translate(exc: OSError, where: str, what: str) -> Exception:
    if exc.errno == errno.ELOOP:
        return UnsafePath(where, f"{what} is a symbolic link; links are not followed")
    if exc.errno == errno.ENAMETOOLONG:
        return UnsafePath(where, "a name is too long")
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return NoSuchFile(where, f"{what} {MISSING}")
    if exc.errno == errno.EACCES:
        return NoSuchFile(where, f"{what} is not readable")
    return exc


def walk_files(
    root: Path, *, hidden: bool = False, single_link: bool = False, limit: int = 10_000
) -> list[FileEntry]:
    """The files under ``root`` that :func:`open_under` would serve, sorted by path.

    Symlinks (to files or folders) are neither followed nor listed; hidden names are
    skipped unless ``hidden``; hard-linked files are skipped with ``single_link``. At most
    ``limit`` entries. A symlinked or missing ``root`` answers as :func:`open_root` does.
    """
    found: list[FileEntry] = []
    root_fd = open_root(root)
    entries = _walk(root_fd, hidden, single_link)
    try:
        for entry in entries:
            found.append(entry)
            if len(found) >= limit:
                break
    finally:
        entries.close()  # fwalk closes the descriptors it still holds
        os.close(root_fd)
    return sorted(found, key=lambda entry: entry.relative)


def _walk(root_fd: int, hidden: bool, single_link: bool) -> Generator[FileEntry, None, None]:
    walker = cast(
        Generator[tuple[str, list[str], list[str], int], None, None],
        os.fwalk(".", dir_fd=root_fd, follow_symlinks=False),
    )
    try:
        for dirpath, dirnames, filenames, dir_fd in walker:
            dirnames[:] = sorted(d for d in dirnames if hidden or not d.startswith("."))
            prefix = "" if dirpath == "." else dirpath[2:] + "/"
            for name in sorted(filenames):
                entry = _file_entry(dir_fd, name, prefix, hidden, single_link)
                if entry is not None:
                    yield entry
    finally:
        walker.close()


def _file_entry(
    dir_fd: int, name: str, prefix: str, hidden: bool, single_link: bool
) -> FileEntry | None:
    if name.startswith(".") and not hidden:
        return None
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None  # gone since the folder was read
    if not stat.S_ISREG(info.st_mode) or (single_link and info.st_nlink > 1):
        return None
    return FileEntry(prefix + name, info)
