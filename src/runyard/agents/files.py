"""A run's output files and the uploaded files, opened for serving without a race.

A run writes its ``out/`` while (and after) it is served, so a name can be swapped for a
symlink or a hard link at any moment. Everything here goes through
:mod:`runyard.workspace.safefs`: opened once, never through a symlink, streamed from the
descriptor. Run outputs with other hard links are neither listed nor served (a run can
link a file it may read but must not hand out, e.g. ``ln /workspace/in/x out/y``).
"""

from __future__ import annotations

import mimetypes
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runyard.agents.errors import AgentInvalid, AgentNotFound
from runyard.errors import NoSuchFile, UnsafePath
from runyard.workspace.safefs import FileEntry, OpenedFile, open_under, walk_files

MAX_LISTED = 10_000


def list_output_files(out_dir: Path) -> list[dict[str, Any]]:
    """Regular, singly linked files under ``out_dir`` (symlinks not followed), by path."""
    try:
        entries = walk_files(out_dir, hidden=True, single_link=True, limit=MAX_LISTED)
    except (NoSuchFile, UnsafePath):
        return []
    return [_entry(entry) for entry in entries]


def _entry(entry: FileEntry) -> dict[str, Any]:
    media, _ = mimetypes.guess_type(entry.relative, strict=False)
    return {
        "path": entry.relative,
        "size": entry.info.st_size,
        "mediaType": media or "application/octet-stream",
        "modifiedAt": _iso(entry.info.st_mtime),
    }


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def open_output(out_dir: Path, relative: str) -> OpenedFile:
    """The regular file ``relative`` names under ``out_dir``, opened; never outside it."""
    return _open(out_dir, relative, "output file", single_link=True)


def open_upload(path: Path) -> OpenedFile:
    """An uploaded file, opened (uploads are hard-linked into runs' ``in/`` by design)."""
    return _open(path.parent, path.name, "uploaded file", single_link=False)


def _open(root: Path, relative: str, kind: str, *, single_link: bool) -> OpenedFile:
    try:
        return open_under(root, relative, hidden=True, single_link=single_link)
    except UnsafePath as exc:
        raise AgentInvalid(str(exc)) from exc
    except NoSuchFile as exc:
        raise AgentNotFound(kind, relative) from exc
