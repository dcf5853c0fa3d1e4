"""``restore_backup``: unpack an archive into new, empty workspace and log folders.

    manifest = restore_backup(Path("backup.tar.gz"), Path("/new/.runyard"), Path("/new/logs"))

Each folder must not exist yet or be empty; anything else is refused before a byte is
written. Members are checked one by one (see :mod:`runyard.backup.members`), written with
``O_CREAT | O_EXCL | O_NOFOLLOW`` under folders opened ``O_NOFOLLOW``, and hashed as
they are written; the manifest (the last member) is then checked against what was
written. The records inside are checked as a server would read them
(:mod:`runyard.backup.records`: ids one path component, task records true to their
folders, mount grants inside ``allowed_mount_roots``) before anything acts on them. On any
failure the restore folders are emptied again (and removed if the restore created them),
so a failed restore leaves nothing half-done. After a good restore the records are
adjusted to their new home (:mod:`runyard.backup.fixups`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tarfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from runyard.backup.errors import BackupError
from runyard.backup.fixups import adopt_restored
from runyard.backup.manifest import LOGS_PREFIX, MANIFEST_NAME, WORKSPACE_PREFIX, Manifest
from runyard.backup.members import (
    Digest,
    check_against,
    copy_hashing,
    members,
    open_archive,
    read_manifest,
    safe_parts,
)
from runyard.backup.records import RecordCheck, Sink
from runyard.backup.walk import DIR_FLAGS
from runyard.workspace.layout import WORKSPACE_FORMAT

NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_DIR_MODE = 0o700
# setgid stays (run folders rely on it); setuid and sticky bits are never restored
KEPT_MODE_BITS = 0o2777


def restore_backup(
    archive: Path, workspace_dir: Path, log_dir: Path,
    progress: Callable[[str, int], None] | None = None,
    allowed_mount_roots: Sequence[Path] = (),
) -> Manifest:  # fmt: skip
    """Restore ``archive`` into ``workspace_dir`` and ``log_dir``; its manifest. Active
    mount grants must lie inside ``allowed_mount_roots`` (the new server's setting)."""
    roots = {
        WORKSPACE_PREFIX: Path(os.path.abspath(workspace_dir)),
        LOGS_PREFIX: Path(os.path.abspath(log_dir)),
    }
    created = [root for root in roots.values() if _check_empty(root)]
    try:
        for root in roots.values():
            root.mkdir(mode=NEW_DIR_MODE, parents=True, exist_ok=True)
        with RecordCheck(allowed_mount_roots) as records:
            manifest = _extract(archive, roots, progress, records)
        adopt_restored(manifest, roots[WORKSPACE_PREFIX], roots[LOGS_PREFIX])
    except BaseException:
        _undo(roots.values(), created)
        raise
    return manifest


def _check_empty(root: Path) -> bool:
    """True when ``root`` does not exist yet; raises unless it is an empty real folder."""
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return True
    if not stat.S_ISDIR(st.st_mode):
        raise BackupError(f"restore target {root} exists and is not a folder")
    with os.scandir(root) as scan:
        occupied = any(scan)
    if occupied:
        raise BackupError(
            f"restore target {root} is not empty: restore only into an empty or new folder"
        )
    return False


def _undo(roots: Iterable[Path], created: list[Path]) -> None:
    for root in roots:
        if root in created:
            shutil.rmtree(root, ignore_errors=True)
            continue
        with contextlib.suppress(OSError), os.scandir(root) as scan:
            for entry in scan:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)


def _extract(
    archive: Path, roots: dict[str, Path], progress: Callable[[str, int], None] | None,
    records: RecordCheck,
) -> Manifest:  # fmt: skip
    seen: dict[str, Digest] = {}
    dir_modes: dict[tuple[str, ...], int] = {}
    manifest: Manifest | None = None
    with open_archive(archive) as tar:
        for member in members(tar):
            if member.name == MANIFEST_NAME:
                manifest = read_manifest(tar, member)
                continue
            parts = safe_parts(member)
            records.name(parts)
            if member.isdir():
                _close(_open_dirs(roots[parts[0]], parts[1:]))
                dir_modes[parts] = member.mode & KEPT_MODE_BITS
                continue
            seen[member.name] = _write_member(
                tar, member, roots[parts[0]], parts, records.open(parts)
            )
            records.close(parts)
            if progress is not None:
                progress(member.name, member.size)
    _check_manifest(manifest, seen)
    assert manifest is not None
    records.finish(manifest)
    _apply_dir_modes(roots, dir_modes)
    return manifest


def _check_manifest(manifest: Manifest | None, seen: dict[str, Digest]) -> None:
    if manifest is None:
        raise BackupError("the archive has no MANIFEST.json (truncated, or not a runyard backup)")
    if manifest.workspace_format > WORKSPACE_FORMAT:
        raise BackupError(
            f"the archive holds workspace format {manifest.workspace_format}, newer than this "
            f"runyard's {WORKSPACE_FORMAT}: restore it with runyard {manifest.runyard_version}"
        )
    problems = check_against(manifest, seen)
    if problems:
        raise BackupError(f"the archive does not match its manifest: {problems[0]}")


def _write_member(
    tar: tarfile.TarFile, member: tarfile.TarInfo, root: Path, parts: tuple[str, ...],
    also: Sink | None,
) -> Digest:  # fmt: skip
    if len(parts) < 2:
        raise BackupError(f"unsafe archive member {member.name!r}: a file in place of a root")
    parent = _open_dirs(root, parts[1:-1])
    try:
        fd = os.open(parts[-1], NEW_FILE, member.mode & 0o777, dir_fd=parent)
    except FileExistsError as exc:
        raise BackupError(f"archive member {member.name!r} appears more than once") from exc
    finally:
        os.close(parent)
    source = tar.extractfile(member)
    assert source is not None
    with os.fdopen(fd, "wb") as out:
        write = out.write if also is None else _both(out.write, also)
        digest = copy_hashing(source, write)
        out.flush()
        os.fsync(out.fileno())
    return digest


def _both(first: Sink, second: Sink) -> Sink:
    def write(chunk: bytes) -> None:
        first(chunk)
        second(chunk)

    return write


def _open_dirs(root: Path, parts: tuple[str, ...]) -> int:
    """Open (creating as needed) ``root/parts...`` without following any link."""
    fd = os.open(root, DIR_FLAGS)
    for part in parts:
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, NEW_DIR_MODE, dir_fd=fd)
            child = os.open(part, DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            raise BackupError(
                f"cannot create folder {part!r} under {root}: {exc.strerror}"
            ) from exc
        os.close(fd)
        fd = child
    return fd


def _close(fd: int) -> None:
    os.close(fd)


def _apply_dir_modes(roots: dict[str, Path], modes: dict[tuple[str, ...], int]) -> None:
    for parts in sorted(modes, key=len, reverse=True):  # deepest first: parents stay open
        fd = _open_dirs(roots[parts[0]], parts[1:])
        try:
            os.fchmod(fd, modes[parts])
        finally:
            os.close(fd)
