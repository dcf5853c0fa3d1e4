"""A run's output files: listing ``out/`` and resolving one file inside it, safely."""

from __future__ import annotations

import mimetypes
import os
from pathlib import Path
from typing import Any

from runyard.agents.errors import AgentInvalid, AgentNotFound
from runyard.errors import UnsafePath
from runyard.workspace.artifacts import resolve_inside

MAX_LISTED = 10_000


def list_output_files(out_dir: Path) -> list[dict[str, Any]]:
    """Regular files under ``out_dir`` (symlinks are not followed), sorted by path."""
    found: list[dict[str, Any]] = []
    for folder, dirs, files in os.walk(out_dir, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            full = Path(folder) / name
            try:
                info = full.lstat()
            except OSError:
                continue
            if not full.is_symlink() and full.is_file():
                found.append(_entry(out_dir, full, info.st_size, info.st_mtime))
            if len(found) >= MAX_LISTED:
                return found
    return found


def _entry(out_dir: Path, full: Path, size: int, mtime: float) -> dict[str, Any]:
    relative = full.relative_to(out_dir).as_posix()
    media, _ = mimetypes.guess_type(relative, strict=False)
    return {
        "path": relative,
        "size": size,
        "mediaType": media or "application/octet-stream",
        "modifiedAt": _iso(mtime),
    }


def _iso(timestamp: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def output_file(out_dir: Path, relative: str) -> Path:
    """The regular file ``relative`` names under ``out_dir``; never outside it."""
    try:
        target = resolve_inside(out_dir, relative)
    except UnsafePath as exc:
        raise AgentInvalid(str(exc)) from exc
    if not target.is_file():
        raise AgentNotFound("output file", relative)
    return target
