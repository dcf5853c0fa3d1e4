"""``verify_backup``: re-read a whole archive and check every file against its manifest.

    manifest = verify_backup(Path("backup.tar.gz"))   # raises BackupError on any mismatch

Streams the archive once, hashing each member; memory stays flat at any file size.
"""

from __future__ import annotations

from collections.abc import Callable
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


def verify_backup(archive: Path, progress: Callable[[str, int], None] | None = None) -> Manifest:
    """The archive's manifest once every file matched it; :class:`BackupError` otherwise."""
    seen: dict[str, Digest] = {}
    manifest: Manifest | None = None
    with open_archive(archive) as tar:
        for member in members(tar):
            if member.name == MANIFEST_NAME:
                manifest = read_manifest(tar, member)
                continue
            safe_parts(member)
            if member.isfile():
                source = tar.extractfile(member)
                assert source is not None
                seen[member.name] = copy_hashing(source, lambda chunk: None)
                if progress is not None:
                    progress(member.name, member.size)
    if manifest is None:
        raise BackupError("the archive has no MANIFEST.json (truncated, or not a runyard backup)")
    problems = check_against(manifest, seen)
    if problems:
        shown = "; ".join(problems[:5]) + (
            f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        )
        raise BackupError(f"the archive does not match its manifest: {shown}")
    return manifest
