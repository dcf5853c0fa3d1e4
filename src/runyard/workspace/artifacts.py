"""Artifact records ``{path, size, sha256}`` with ``path`` relative to the task folder.

A path is refused when it is absolute, has ``..`` or NUL, is not UTF-8 text (a file of
such a name stays in its folder but is no artifact: :mod:`runyard.workspace.filenames`),
or resolves (through symlinks) outside the task folder. Size and sha256 are taken from the
finished file, streamed.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path, PurePosixPath
from typing import Any

from runyard.errors import NoSuchFile, UnsafePath
from runyard.faults import fault_point
from runyard.workspace.filenames import is_text_name, shown_name
from runyard.workspace.safefs import open_under

CHUNK = 1 << 20


def check_relative_path(rel: object) -> PurePosixPath:
    """A clean relative POSIX path, or :class:`UnsafePath` saying why not."""
    if not isinstance(rel, str) or not rel:
        raise UnsafePath(repr(rel), "an artifact path is a non-empty string")
    if not is_text_name(rel):  # its record could not be written: JSON holds text only
        raise UnsafePath(shown_name(rel), "an artifact's name must be UTF-8 text")
    if "\x00" in rel or "\\" in rel:
        raise UnsafePath(rel, "NUL and backslash are not allowed")
    pure = PurePosixPath(rel)
    if pure.is_absolute():
        raise UnsafePath(rel, "must be relative to the task folder")
    if any(part == ".." for part in pure.parts):
        raise UnsafePath(rel, "'..' would leave the task folder")
    if not pure.parts or pure.parts == (".",):
        raise UnsafePath(rel, "names no file")
    return pure


def resolve_inside(base: Path, rel: object) -> Path:
    """``base / rel`` after checking that it, symlinks resolved, stays inside ``base``."""
    pure = check_relative_path(rel)
    real_base = Path(os.path.realpath(base))
    target = Path(os.path.realpath(real_base.joinpath(*pure.parts)))
    if target != real_base and real_base not in target.parents:
        raise UnsafePath(str(rel), "resolves outside its folder")
    return target


def sha256_file(path: Path) -> tuple[int, str]:
    """``(size, hex sha256)`` of a file, streamed."""
    with open(path, "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256")
        size = fh.tell()
    return size, digest.hexdigest()


def artifact_record(task_dir: Path, rel: str) -> dict[str, Any]:
    """The record of a finished file inside ``task_dir``: ``{path, size, sha256}``.

    The checked path is opened once, component by component without following a symlink,
    and hashed from that descriptor: a name swapped for a link after the check fails
    instead of recording some other file's size and hash.
    """
    fault_point("artifact")
    target = resolve_inside(task_dir, rel)
    real_base = Path(os.path.realpath(task_dir))
    inside = target.relative_to(real_base).as_posix() if target != real_base else ""
    try:
        opened = open_under(real_base, inside, hidden=True)
    except NoSuchFile as exc:
        raise UnsafePath(rel, "is not a regular file in the task folder") from exc
    with opened, os.fdopen(os.dup(opened.fd), "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
        size = fh.tell()
    return {"path": str(check_relative_path(rel)), "size": size, "sha256": digest}


def verify_artifact(task_dir: Path, record: dict[str, Any]) -> bool:
    """True when the file still has the recorded size and sha256."""
    try:
        current = artifact_record(task_dir, record["path"])
    except (UnsafePath, KeyError, OSError):
        return False
    return current["size"] == record.get("size") and current["sha256"] == record.get("sha256")
