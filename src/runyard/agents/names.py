"""Checks for the names a client chooses: upload file names, relative paths, grant names.

Bad names are refused with a message that says the rule, never silently rewritten. The one
derived name, the placement name ``<artifact-id>-<sanitized-name>`` of an artifact without
a relative path, keeps only a safe character set.
"""

from __future__ import annotations

import mimetypes
import re
import unicodedata
from pathlib import PurePosixPath

from runyard.agents.errors import AgentInvalid

MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 1024
MAX_DEPTH = 32
MAX_TITLE_CHARS = 200
RESERVED_INPUTS = frozenset({"run-context.json"})
GRANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
MEDIA_TYPE = re.compile(r"^[A-Za-z0-9!#$&^_.+-]{1,64}/[A-Za-z0-9!#$&^_.+-]{1,64}$")
FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def _check_characters(value: str, what: str) -> None:
    for char in value:
        if unicodedata.category(char) in FORBIDDEN_CATEGORIES:
            raise AgentInvalid(
                f"{what} {value!r} contains the control or format character "
                f"U+{ord(char):04X}; only printable characters are allowed"
            )


def check_segment(segment: str, what: str) -> str:
    """One path segment: non-empty, not ``.``/``..``, no slash, printable, <= 255 bytes."""
    if segment in ("", ".", ".."):
        raise AgentInvalid(f"{what} may not contain an empty, '.' or '..' segment")
    if "/" in segment or "\\" in segment:
        raise AgentInvalid(f"{what} {segment!r} may not contain '/' or '\\'")
    _check_characters(segment, what)
    if len(segment.encode("utf-8")) > MAX_NAME_BYTES:
        raise AgentInvalid(f"{what} segment is longer than {MAX_NAME_BYTES} bytes")
    return segment


def check_file_name(name: str | None) -> str:
    """An upload's file name: a single printable segment of at most 255 bytes."""
    if not name:
        raise AgentInvalid("The upload has no file name; send the file part with a filename")
    return check_segment(name, "File name")


def check_relative_path(value: str | None) -> str:
    """A relative POSIX path under ``in/``: no ``..``, not absolute, printable, bounded."""
    if value is None or value == "":
        return ""
    what = "relativePath"
    if value.startswith("/") or re.match(r"^[A-Za-z]:", value):
        raise AgentInvalid(f"{what} {value!r} must be relative (it is placed under in/)")
    if "\\" in value:
        raise AgentInvalid(f"{what} {value!r} may not contain '\\'; separate folders with '/'")
    if len(value.encode("utf-8")) > MAX_PATH_BYTES:
        raise AgentInvalid(f"{what} is longer than {MAX_PATH_BYTES} bytes")
    segments = value.split("/")
    if len(segments) > MAX_DEPTH:
        raise AgentInvalid(f"{what} is deeper than {MAX_DEPTH} folders")
    for segment in segments:
        check_segment(segment, what)
    if value in RESERVED_INPUTS:
        raise AgentInvalid(f"{what} {value!r} is reserved for the file runyard writes")
    return str(PurePosixPath(value))


def placement_name(artifact_id: str, file_name: str) -> str:
    """``<artifact-id>-<sanitized-name>``: only ``[A-Za-z0-9._-]`` and never hidden."""
    safe = UNSAFE_CHARS.sub("_", unicodedata.normalize("NFKD", file_name)).strip("._")
    return f"{artifact_id}-{safe[:100] or 'file'}"


def media_type_for(file_name: str, declared: str | None) -> str:
    declared = (declared or "").split(";")[0].strip().lower()
    if declared and declared != "application/octet-stream" and MEDIA_TYPE.match(declared):
        return declared
    guessed, _ = mimetypes.guess_type(file_name, strict=False)
    return guessed or "application/octet-stream"


def check_grant_name(name: str) -> str:
    if not isinstance(name, str) or not GRANT_NAME.match(name):
        raise AgentInvalid(
            f"Mount grant name {name!r} must match {GRANT_NAME.pattern} "
            "(it becomes /workspace/mounts/<name>)"
        )
    return name


def check_title(title: str | None) -> str:
    title = title or ""
    if len(title) > MAX_TITLE_CHARS:
        raise AgentInvalid(f"title is longer than {MAX_TITLE_CHARS} characters")
    _check_characters(title, "title")
    return title


def paths_overlap(first: str, second: str) -> bool:
    """True when one relative path is the other or a folder of it (they cannot coexist)."""
    return first == second or first.startswith(second + "/") or second.startswith(first + "/")
