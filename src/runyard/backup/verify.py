"""``verify_backup``: re-read a whole archive and check every file against its manifest.

    manifest = verify_backup(Path("backup.tar.gz"))   # raises BackupError on any mismatch

Streams the archive once, hashing each member; memory stays flat at any file size. The
records inside are checked too, as a server would read them (:mod:`runyard.backup.records`):
an archive whose hashes match but whose records carry ids that are not one path component,
or mount grants outside ``allowed_mount_roots``, is not intact either.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from runyard.backup.errors import BackupError
from runyard.backup.manifest import MANIFEST_NAME, Manifest
from runyard.backup.members import (
    Digest,
    check_against,
    copy_hashing,
    members,
    open_archive,
    read_manifest,
    safe_parts,
)
from runyard.backup.records import RecordCheck


def verify_backup(
    archive: Path,
    progress: Callable[[str, int], None] | None = None,
    allowed_mount_roots: Sequence[Path] = (),
) -> Manifest:
    """The archive's manifest once every file matched it and every record passed its
    check; :class:`BackupError` otherwise."""
    seen: dict[str, Digest] = {}
    manifest: Manifest | None = None
    with RecordCheck(allowed_mount_roots) as records, open_archive(archive) as tar:
        for member in members(tar):
            if member.name == MANIFEST_NAME:
                manifest = read_manifest(tar, member)
                continue
            parts = safe_parts(member)
            records.name(parts)
            if member.isfile():
                source = tar.extractfile(member)
                assert source is not None
                seen[member.name] = copy_hashing(source, records.open(parts) or _discard)
                records.close(parts)
                if progress is not None:
                    progress(member.name, member.size)
        if manifest is None:
            raise BackupError(
                "the archive has no MANIFEST.json (truncated, or not a runyard backup)"
            )
        problems = check_against(manifest, seen)
        if problems:
            shown = "; ".join(problems[:5]) + (
                f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
            )
            raise BackupError(f"the archive does not match its manifest: {shown}")
        records.finish(manifest)
    return manifest


def _discard(chunk: bytes) -> None:
    """A member that is only hashed."""
