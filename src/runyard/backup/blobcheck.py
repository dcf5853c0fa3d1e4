"""The kept runs' file store in an archive (``workspace/.history/.blobs/<xx>/<sha256>``):
each blob is named by the sha256 of its content, and a restore or a verify checks that it
is, hashing it as it streams by. A blob whose name is no sha256, sits under another
prefix, or holds other bytes than its name says is a problem of the archive: restored, a
manifest naming that sha would serve those bytes as another run's file.

    check = BlobCheck()
    sink = check.open(parts)            # None for a member that is no blob
    ...; problem = check.close(parts)   # after the member was read whole
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from runyard.workspace.blobstore import BLOBS_DIR, is_sha

HIDDEN = "."  # the store's lock and temp files: no blob


def blob_name_problem(parts: tuple[str, ...]) -> str | None:
    """What is wrong with ``.blobs/<xx>/<name>`` (``parts`` below ``.history``)."""
    if len(parts) < 2 or parts[0] != BLOBS_DIR or parts[1].startswith(HIDDEN):
        return None
    shard = parts[1]
    if len(parts) == 2:
        return None if _is_shard(shard) else f"the store folder {shard!r} is no sha256 prefix"
    name = parts[2]
    if len(parts) > 3 or not _is_shard(shard) or not is_sha(name) or name[:2] != shard:
        return f"the stored file {'/'.join(parts[1:])!r} is not named <xx>/<sha256>"
    return None


def _is_shard(name: str) -> bool:
    return len(name) == 2 and all(c in "0123456789abcdef" for c in name)


def _blob_sha(parts: tuple[str, ...]) -> str | None:
    """The sha a member ``workspace/.history/.blobs/<xx>/<sha>`` names, else None."""
    if len(parts) == 5 and parts[1:3] == (".history", BLOBS_DIR) and is_sha(parts[4]):
        return parts[4]
    return None


class BlobCheck:
    """Hashes the blobs of an archive as they are read."""

    def __init__(self) -> None:
        self._hashes: dict[tuple[str, ...], hashlib._Hash] = {}

    def open(self, parts: tuple[str, ...]) -> Callable[[bytes], object] | None:
        if _blob_sha(parts) is None:
            return None
        digest = self._hashes[parts] = hashlib.sha256()
        return digest.update

    def close(self, parts: tuple[str, ...]) -> str | None:
        digest = self._hashes.pop(parts, None)
        sha = _blob_sha(parts)
        if digest is None or sha is None or digest.hexdigest() == sha:
            return None
        return "its content is not what its name (a sha256) says"
