"""The manifest of a backup archive: every file with its size and sha256.

It is the archive's last member, ``MANIFEST.json``, written after every file was streamed
(each file's hash is known only once its bytes are in the archive)::

    {"format": "runyard-backup", "version": 1, "runyard_version": "0.1.0",
     "workspace_format": 1, "created_at": "...Z",
     "source": {"workspace_dir": "/data/.runyard", "log_dir": "/data/logs"},
     "files": [{"path": "workspace/base/<task_id>/status.json", "size": 412,
                "sha256": "...", "mode": 420}, ...],
     "dirs": [{"path": "workspace/agent/uploads", "mode": 1528}, ...],
     "running_tasks": ["base#command#t1", ...],
     "skipped": [{"path": "workspace/server.json", "reason": "server credentials"}, ...],
     "changed_while_read": ["logs/base/<task_id>/<run>.log", ...]}

Members live under ``workspace/`` (the workspace root) and ``logs/`` (the log folder).

File names are bytes (:mod:`runyard.workspace.filenames`): an entry of ``files``, ``dirs``
or ``skipped`` whose path is not UTF-8 has its shown name in ``path`` and its exact bytes,
in hex, in ``path_hex``; ``changed_while_read`` holds shown names. Such a member is
archived under its own bytes (a PAX header of ``hdrcharset=BINARY``), so verify and
restore find it and restore it byte-exact.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from runyard.backup.errors import BackupError
from runyard.workspace.filenames import entry_from_json, entry_to_json, shown_name

MANIFEST_NAME = "MANIFEST.json"
ARCHIVE_FORMAT = "runyard-backup"
ARCHIVE_VERSION = 1
WORKSPACE_PREFIX = "workspace"
LOGS_PREFIX = "logs"
# bounds what verify and restore read into memory for the one member they parse whole
MAX_MANIFEST_BYTES = 1 << 30


@dataclass
class FileEntry:
    path: str
    size: int
    sha256: str
    mode: int


@dataclass
class Manifest:
    runyard_version: str
    workspace_format: int
    created_at: str
    source: dict[str, str]
    files: list[FileEntry] = field(default_factory=list)
    dirs: list[dict[str, Any]] = field(default_factory=list)
    running_tasks: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    changed_while_read: list[str] = field(default_factory=list)

    def skip(self, path: str, reason: str) -> None:
        self.skipped.append({"path": path, "reason": reason})

    def to_bytes(self) -> bytes:
        data = {"format": ARCHIVE_FORMAT, "version": ARCHIVE_VERSION, **asdict(self)}
        for key in ("files", "dirs", "skipped"):
            data[key] = [entry_to_json(entry) for entry in data[key]]
        data["changed_while_read"] = [shown_name(path) for path in self.changed_while_read]
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Manifest:
        """Parse a manifest; a :class:`BackupError` says what is wrong with it."""
        try:
            data = json.loads(raw)
            if data.get("format") != ARCHIVE_FORMAT or data.get("version") != ARCHIVE_VERSION:
                raise BackupError("the archive's manifest is not a runyard backup manifest")
            return cls(
                runyard_version=str(data["runyard_version"]),
                workspace_format=int(data["workspace_format"]),
                created_at=str(data["created_at"]),
                source=dict(data["source"]),
                files=[FileEntry(**entry_from_json(entry)) for entry in data["files"]],
                dirs=[entry_from_json(entry) for entry in data["dirs"]],
                running_tasks=[str(task) for task in data["running_tasks"]],
                skipped=[entry_from_json(entry) for entry in data["skipped"]],
                changed_while_read=list(data["changed_while_read"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BackupError(f"the archive's manifest cannot be read: {exc}") from exc
