"""Reading one task folder into the compact form the index keeps.

The index keeps, per task, the answer bytes of a valid status (packed: see
:mod:`runyard.repository.keptbytes`) plus the few fields queries need (sort instant, state,
parents); full models are parsed again only when asked for.
Reads follow the workspace's tolerance rules: a symlinked folder or record, invalid JSON,
a record whose identity does not match its folder — all read as missing.
"""

from __future__ import annotations

import json
import os
import re
from array import array
from collections.abc import Callable, Container, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final, NamedTuple

from pydantic import ValidationError

from runyard.repository import keptbytes
from runyard.workspace.atomic import read_bytes_tolerant
from runyard.workspace.identity import REG_NAME_RE, TASK_NAME_RE, TASK_TYPES
from runyard.workspace.layout import METADATA_FILE, STATUS_FILE
from runyard.workspace.records import OPTIONAL_STATUS_FIELDS, TaskMetadata, TaskStatus

MAX_RECORD_BYTES = 32 << 20
_DECLARED = frozenset(TaskStatus.model_fields)  # the others are extra fields
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # how runyard writes every created_at
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# The identity rules of runyard.workspace.identity as one pattern: parents are checked
# for every record at start, and one match is several times cheaper than parse_task_id.
TASK_ID_RE = re.compile(
    "(?:{})#{}#{}".format(
        "|".join(sorted(TASK_TYPES)),
        REG_NAME_RE.pattern.strip("^$"),
        TASK_NAME_RE.pattern.strip("^$"),
    )
)


# Index records are plain tuples of immutable values: the cyclic GC stops tracking such
# tuples, so 100,000 of them add nothing to the cost of a collection (instances of a
# NamedTuple or a slotted class would stay tracked and make every full collection slower).
StatusRecord = tuple[int, str | None, tuple[str, ...], bytes, str]
"""``(instant, created_at, parents, packed, state)`` of a valid status: ``packed`` is
the status as answers carry it (``TaskStatus.to_json`` as compact JSON, so a full list is
written out without building a model), packed by :func:`keptbytes.pack` (read it with
:func:`status_json`); ``created_at`` is None when it is the text runyard writes for
``instant`` (see :func:`created_at_text`)."""
MetadataValues = tuple[int, str | None, tuple[str, ...]]
MetadataRecord = MetadataValues | StatusRecord
"""``(instant, created_at, parents)`` of a valid metadata file: what lineage needs; the
file is read again for anything else. When the status has the same three values (the
usual case) the record is the status record itself, whose first three fields they are
(:func:`shared`): a task with both records holds one tuple. Read it by index
(``META_INSTANT``, ``META_CREATED_AT``, ``META_PARENTS``), never by unpacking."""
INSTANT: Final = 0
CREATED_AT: Final = 1
PARENTS: Final = 2
RAW: Final = 3
STATE: Final = 4
META_INSTANT: Final = 0
META_CREATED_AT: Final = 1
META_PARENTS: Final = 2
# The shape and encoding of the two records above, saved with every index snapshot
# (runyard.repository.snapshot): raise it whenever either changes, so a snapshot written
# by another version is refused and the folders are read again.
RECORDS_FORMAT: Final = 3


def status_json(record: StatusRecord) -> bytes | None:
    """The status's answer bytes; None if the kept bytes are damaged (read the file then)."""
    return keptbytes.unpack(record[RAW])


def recent_status_json(record: StatusRecord) -> bytes | None:
    """:func:`status_json` for one status or a page of them (see
    :func:`keptbytes.unpack_recent`); a pass over every status calls :func:`status_json`."""
    return keptbytes.unpack_recent(record[RAW])


class DamagedRecord(ValueError):
    """Kept status bytes that do not unpack (read the task's file instead)."""


def status_model(record: StatusRecord) -> TaskStatus:
    """The status as a model; :class:`DamagedRecord` if the kept bytes are damaged."""
    data = recent_status_json(record)
    if data is None:
        raise DamagedRecord("the index's bytes of a status do not unpack")
    return TaskStatus.model_validate_json(data)


def created_at_text(instant: int, created_at: str | None) -> str:
    """The ``created_at`` a record stands for (its text, or the one runyard writes)."""
    return created_at if created_at is not None else instant_text(instant)


def instant_text(instant: int) -> str:
    return (_EPOCH + timedelta(microseconds=instant)).strftime(_TIME_FORMAT)


# the text runyard writes (_TIME_FORMAT) for years 1000-9999, where %Y has four digits
_USUAL_TEXT = re.compile(r"[1-9][0-9]{3}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")


def kept_created_at(instant: int, created_at: str) -> str | None:
    """None when ``created_at`` is the text runyard writes for ``instant`` (the usual
    case: the record then holds no string), else ``created_at``."""
    if instant != -1 and _USUAL_TEXT.fullmatch(created_at) and sort_instant(created_at) == instant:
        return None  # every field fixed width: formatting the instant gives these digits
    try:
        return None if instant_text(instant) == created_at else created_at
    except (OverflowError, ValueError):
        return created_at


class FolderRecords(NamedTuple):
    """What one read of a task folder found; ``exists`` is False when there is no folder."""

    exists: bool
    status: StatusRecord | None = None
    metadata: MetadataRecord | None = None


def sort_instant(created_at: str) -> int:
    """Microseconds since the epoch (naive times are UTC); -1 when it is not a time."""
    try:
        moment = datetime.fromisoformat(created_at)
    except ValueError:
        return -1
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def parse_parents(value: object, task_id: str) -> tuple[str, ...]:
    """Upstream ids from a recorded ``source_tasks``, tolerantly: bad entries are dropped."""
    if not value:
        return ()
    if isinstance(value, str):
        items: list[object] = list(value.split(","))
    elif isinstance(value, list):
        items = value
    else:
        return ()
    parents: dict[str, None] = {}
    for item in items:
        if not isinstance(item, str):
            continue
        candidate = item.strip()
        if candidate != task_id and TASK_ID_RE.fullmatch(candidate):
            parents[candidate] = None
    return tuple(parents)


def _task_type(task_id: str) -> str:
    return task_id[: task_id.find("#")]


def parse_status(raw: bytes | None, task_id: str) -> tuple[StatusRecord, TaskStatus] | None:
    """A valid status for ``task_id`` from raw bytes (compact and full), or None."""
    if raw is None:
        return None
    try:
        status = TaskStatus.model_validate_json(raw)
    except ValidationError:
        return None
    record = status_record(status, task_id)
    return None if record is None else (record, status)


def status_record(status: TaskStatus, task_id: str) -> StatusRecord | None:
    """The index's record of ``status``; None when it is not a status of ``task_id``."""
    if status.task_id != task_id or status.task_type != _task_type(task_id):
        return None
    instant = sort_instant(status.created_at)
    created_at = kept_created_at(instant, status.created_at)
    parents = parse_parents(status.config.get("source_tasks"), task_id)
    packed = keptbytes.pack(wire_bytes(status))
    return (instant, created_at, parents, packed, status.state.value)


def wire_bytes(status: TaskStatus) -> bytes:
    """``status.to_json()`` as compact JSON, serialized in one step (no dict is built)."""
    extra = status.__pydantic_extra__ or {}
    absent = {
        name
        for name in OPTIONAL_STATUS_FIELDS
        if (getattr(status, name) if name in _DECLARED else extra.get(name)) is None
    }
    return status.__pydantic_serializer__.to_json(status, exclude=absent)


def parse_metadata(raw: bytes | None, task_id: str) -> tuple[MetadataRecord, TaskMetadata] | None:
    """A valid metadata envelope for ``task_id`` from raw bytes (compact and full), or None."""
    if raw is None:
        return None
    try:
        meta = TaskMetadata.model_validate_json(raw)
    except ValidationError:
        return None
    if meta.task_id != task_id or meta.task_type != _task_type(task_id):
        return None
    instant = sort_instant(meta.created_at)
    parents = parse_parents(meta.input_params.get("source_tasks"), task_id)
    return (instant, kept_created_at(instant, meta.created_at), parents), meta


TaskFolder = tuple[str, str, int]
"""``(task_id, path, inode)`` of a task folder."""


def list_task_folders(
    root: Path, known: Container[str] = (), types: Iterable[str] = TASK_TYPES
) -> list[TaskFolder]:
    """Every real folder with a valid id under the (``types``) type folders, with its inode.

    Like ``Workspace.iter_task_dirs`` plus the id check (skipped for ``known`` names), with
    plain strings (at 100,000 folders, building ``Path`` objects alone costs a large share
    of the start-up budget); the inode comes with the directory entry, free.

    The ids (kept by the index) are all made first, the paths and tuples (dropped once the
    index is built) only then: made in turns, they would share the allocator's pages, and
    the freed half would stay in the process (about 190 bytes a task).
    """
    listed = []
    for task_type in sorted(types):
        folder = os.path.join(root, task_type)
        listed.append((folder, *_task_dir_names(folder, task_type + "#", known)))
    return [
        (name, f"{folder}/{name}", inode)
        for folder, names, inodes in listed
        for name, inode in zip(names, inodes, strict=True)
    ]


def _task_dir_names(
    folder: str, prefix: str, known: Container[str]
) -> tuple[list[str], array[int]]:
    names: list[str] = []
    inodes = array("Q")
    try:
        entries = os.scandir(folder)
    except OSError:
        return names, inodes
    with entries:
        for entry in entries:
            name = entry.name
            valid = name in known or (name.startswith(prefix) and TASK_ID_RE.fullmatch(name))
            if valid and entry.is_dir(follow_symlinks=False):
                names.append(name)
                inodes.append(entry.inode())
    return names, inodes


def open_task_dir(task_dir: Path | str) -> int | None:
    """A descriptor of the task folder, or None when it is missing or a symlink."""
    try:
        return os.open(task_dir, _DIR_FLAGS)
    except OSError:
        return None


def read_record_bytes(dir_fd: int | None, name: str) -> bytes | None:
    """A regular, non-symlinked file, whole; None otherwise or when oversized.

    ``name`` is relative to ``dir_fd``, or a full path when ``dir_fd`` is None.
    """
    return read_bytes_tolerant(name, dir_fd=dir_fd, limit=MAX_RECORD_BYTES)


def read_folder(
    task_dir: Path | str, task_id: str, indexed: StatusRecord | None = None
) -> FolderRecords:
    """Status and metadata of one task folder, each None when missing or invalid;
    ``indexed``, the status record the index holds, is taken as it is when the file's bytes
    are its answer bytes (how runyard writes a status), not made again."""
    dir_fd = open_task_dir(task_dir)
    if dir_fd is None:
        return FolderRecords(exists=False)
    try:
        status_raw = read_record_bytes(dir_fd, STATUS_FILE)
        metadata_raw = read_record_bytes(dir_fd, METADATA_FILE)
    finally:
        os.close(dir_fd)
    if indexed is not None and status_raw is not None and status_raw == recent_status_json(indexed):
        metadata = parse_metadata(metadata_raw, task_id)
        meta = shared(metadata[0], indexed) if metadata else None
        return FolderRecords(True, indexed, meta)
    return _records(status_raw, metadata_raw, task_id)


def scan_folder(task_dir: str, task_id: str) -> FolderRecords:
    """:func:`read_folder` for a folder a listing just found to be a real directory."""
    return _records(
        read_record_bytes(None, f"{task_dir}/{STATUS_FILE}"),
        read_record_bytes(None, f"{task_dir}/{METADATA_FILE}"),
        task_id,
    )


def _records(status_raw: bytes | None, metadata_raw: bytes | None, task_id: str) -> FolderRecords:
    status = parse_status(status_raw, task_id)
    metadata = parse_metadata(metadata_raw, task_id)
    if status is None or metadata is None:
        return FolderRecords(
            exists=True,
            status=status[0] if status else None,
            metadata=metadata[0] if metadata else None,
        )
    return FolderRecords(True, status[0], shared(metadata[0], status[0]))


def shared(metadata: MetadataRecord, status: StatusRecord) -> MetadataRecord:
    """``metadata`` as the status record itself when their three values are equal, else
    holding the status's objects for the values both have."""
    instant, created_at = metadata[META_INSTANT], metadata[META_CREATED_AT]
    parents = metadata[META_PARENTS]
    same_time = instant == status[INSTANT] and created_at == status[CREATED_AT]
    if same_time and parents == status[PARENTS]:
        return status
    if same_time:
        instant, created_at = status[INSTANT], status[CREATED_AT]
    if parents == status[PARENTS]:
        parents = status[PARENTS]
    return instant, created_at, parents


def metadata_values(record: MetadataRecord | None) -> MetadataValues | None:
    """``(instant, created_at, parents)`` of a metadata record (which may be the status
    record itself, see :func:`shared`): what to compare a record read again with."""
    if record is None:
        return None
    return record[META_INSTANT], record[META_CREATED_AT], record[META_PARENTS]


def read_one(task_dir: Path, name: str) -> tuple[bool, bytes | None]:
    """``(folder exists, raw bytes of one record)``."""
    dir_fd = open_task_dir(task_dir)
    if dir_fd is None:
        return False, None
    try:
        return True, read_record_bytes(dir_fd, name)
    finally:
        os.close(dir_fd)


def text_matcher(text: str) -> Callable[[str, StatusRecord], bool]:
    """A case-insensitive test of a status's id, name, state, error and config values.

    The answer bytes are searched first (cheap); only candidates are parsed to confirm that
    the text is in a value, not a field name. A status whose kept bytes are damaged does
    not match (only its id is searched).
    """
    needle = text.casefold()
    # a non-ASCII needle may be \u-escaped in the file: skip the byte prefilter then
    raw_needle = json.dumps(needle)[1:-1].encode() if needle.isascii() else b""

    def matches(task_id: str, record: StatusRecord) -> bool:
        if needle in task_id.casefold():
            return True
        raw = status_json(record)
        if raw is None or raw_needle not in raw.lower():
            return False
        try:
            data = json.loads(raw)
        except ValueError:
            return False
        values = [data.get("task_name"), data.get("state"), data.get("error")]
        values += _leaf_values(data.get("config"))
        return any(needle in str(value).casefold() for value in values if value is not None)

    return matches


def _leaf_values(value: object) -> list[object]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaf_values(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaf_values(item)]
    return [value]
