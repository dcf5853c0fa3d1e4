"""Reading an archive back: which members are acceptable, and what they hashed to.

Only regular files and folders under ``workspace/`` or ``logs/``, plus the manifest, are
accepted. Absolute names, ``..`` or ``.`` parts, empty parts, links of either kind,
devices and FIFOs are refused with a :class:`BackupError` that names the member — a
crafted archive must never write outside the restore folders.
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from runyard.backup.errors import BackupError
from runyard.backup.manifest import (
    LOGS_PREFIX,
    MAX_MANIFEST_BYTES,
    WORKSPACE_PREFIX,
    Manifest,
)

CHUNK = 1 << 20
ROOTS = (WORKSPACE_PREFIX, LOGS_PREFIX)


@dataclass(frozen=True)
class Digest:
    size: int
    sha256: str


def open_archive(path: Path) -> tarfile.TarFile:
    """A streaming reader (plain or gzip, detected) of the archive at ``path``."""
    try:
        return tarfile.open(path, mode="r|*")
    except (OSError, tarfile.TarError) as exc:
        raise BackupError(f"cannot read {path} as a tar archive: {exc}") from exc


def safe_parts(member: tarfile.TarInfo) -> tuple[str, ...]:
    """The name of an acceptable file or folder member, split; raises for anything else."""
    name = member.name
    if not (member.isfile() or member.isdir()):
        raise BackupError(f"unsafe archive member {name!r}: {_kind(member)} are not restored")
    if name.startswith("/"):
        raise BackupError(f"unsafe archive member {name!r}: absolute path")
    parts = tuple(name.rstrip("/").split("/"))
    if any(part in ("", ".", "..") for part in parts):
        raise BackupError(f"unsafe archive member {name!r}: '..', '.' or empty path part")
    if parts[0] not in ROOTS:
        raise BackupError(f"unsafe archive member {name!r}: not under workspace/ or logs/")
    return parts


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return "symbolic links"
    if member.islnk():
        return "hard links"
    if member.isdev():
        return "devices and FIFOs"
    return "special members"


def copy_hashing(source: IO[bytes], write: Callable[[bytes], object]) -> Digest:
    """Stream ``source`` to ``write`` in chunks; the size and sha256 of what went through."""
    sha = hashlib.sha256()
    size = 0
    while chunk := source.read(CHUNK):
        sha.update(chunk)
        size += len(chunk)
        write(chunk)
    return Digest(size, sha.hexdigest())


def read_manifest(tar: tarfile.TarFile, member: tarfile.TarInfo) -> Manifest:
    if not member.isfile() or member.size > MAX_MANIFEST_BYTES:
        raise BackupError("the archive's manifest is not a plain file of a sane size")
    source = tar.extractfile(member)
    assert source is not None  # a regular file member always has content
    return Manifest.from_bytes(source.read())


def members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The members in order; a damaged or truncated archive raises :class:`BackupError`."""
    try:
        yield from tar
    except (OSError, EOFError, tarfile.TarError) as exc:
        raise BackupError(f"the archive is damaged or truncated: {exc}") from exc


def check_against(manifest: Manifest, seen: dict[str, Digest]) -> list[str]:
    """Every way the files found differ from the manifest (empty when they all match)."""
    problems = []
    listed = {entry.path: entry for entry in manifest.files}
    for path, entry in listed.items():
        got = seen.get(path)
        if got is None:
            problems.append(f"{path}: listed in the manifest but missing from the archive")
        elif got.size != entry.size or got.sha256 != entry.sha256:
            problems.append(f"{path}: size or sha256 differs from the manifest")
    problems += [
        f"{path}: in the archive but not in the manifest" for path in seen if path not in listed
    ]
    return problems
