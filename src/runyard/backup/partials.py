"""What ``runyard backup create`` writes outside the workspace, journaled inside it, so a
server's start removes what a killed backup left.

A backup is written beside its target as ``.<name>.partial-<pid>`` and renamed into place;
its SQLite copies go to a private scratch folder (``runyard-backup-*`` in the temp folder,
a copy of ``state.db`` among them). A backup killed on the way leaves both, somewhere the
server cannot guess. So once it has made them, it records them in
``<workspace>/.partials/backup-<pid>-<random>.json``::

    {"kind": "backup", "pid": 4242, "started": 912345, "host": "lab-1",
     "files": [{"path": "/srv/b/.b.tar.gz.partial-4242", "dev": 2049, "ino": 77},
               {"path": "/tmp/runyard-backup-k2j4", "dev": 2049, "ino": 80, "folder": true}]}

and removes the entry after them. :func:`sweep_partials` removes an entry's files once its
writer is gone: its pid ended, or was reused (``started``, the process start time, differs).
A file goes only while it is still the one recorded: not a link, a regular file or a real
folder as recorded, the same ``(st_dev, st_ino)``, owned by this user. Entries of another
host are left alone; an entry that does not parse goes once the pid in its name is gone.
A backup killed between making its files and recording them (a few system calls) leaves
them unrecorded; a workspace the backup cannot write (read-only) gets no entry.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runyard.executors.pidwatch import is_alive, process_start_time
from runyard.workspace.safefs import DIR_FLAGS

PARTIALS_DIR = ".partials"
MAX_ENTRY_BYTES = 64 * 1024
_ENTRY_NAME = re.compile(r"backup-(\d{1,10})-[0-9a-f]{8}\.json")


@dataclass(frozen=True)
class Journaled:
    """One entry of the journal; :meth:`close` removes it once its files are gone."""

    path: Path | None

    def close(self) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()


def record_partials(workspace_dir: Path, files: list[Path]) -> Journaled:
    """Record ``files`` (made by this process) in the journal of ``workspace_dir``.

    Best effort: a workspace this process cannot write gets no entry (the backup goes on).
    """
    pid = os.getpid()
    entry = {
        "kind": "backup", "pid": pid, "started": process_start_time(pid),
        "host": socket.gethostname(), "files": [_identity(path) for path in files],
    }  # fmt: skip
    folder = workspace_dir / PARTIALS_DIR
    path = folder / f"backup-{pid}-{secrets.token_hex(4)}.json"
    try:
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
        _write_new(path, json.dumps(entry).encode())
    except OSError:
        return Journaled(None)
    return Journaled(path)


def _identity(path: Path) -> dict[str, Any]:
    found = os.lstat(path)
    return {
        "path": os.path.abspath(path), "dev": found.st_dev, "ino": found.st_ino,
        "folder": stat.S_ISDIR(found.st_mode),
    }  # fmt: skip


def _write_new(path: Path, data: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def sweep_partials(workspace_root: Path) -> list[str]:
    """Remove what killed backups of this workspace left (see the module docstring); the
    paths removed. Entries of live writers and of other hosts are kept."""
    try:
        folder = os.open(workspace_root / PARTIALS_DIR, DIR_FLAGS)
    except OSError:  # none yet, or a link in its place: nothing recorded by us
        return []
    removed: list[str] = []
    try:
        for name in sorted(os.listdir(folder)):
            matched = _ENTRY_NAME.fullmatch(name)
            if matched is not None:
                removed += _sweep_entry(folder, name, int(matched.group(1)))
    finally:
        os.close(folder)
    return removed


def _sweep_entry(folder: int, name: str, pid: int) -> list[str]:
    entry = _read_entry(folder, name)
    if entry is None:  # half-written, or not ours: it records nothing that can be checked
        if not is_alive(pid):
            _unlink_at(folder, name)
        return []
    if entry.get("host") != socket.gethostname() or entry.get("pid") != pid:
        return []
    started = entry.get("started")
    if is_alive(pid, started if isinstance(started, int) else None):
        return []
    removed = [path for path in map(_remove_recorded, _files(entry)) if path is not None]
    _unlink_at(folder, name)
    return removed


def _read_entry(folder: int, name: str) -> dict[str, Any] | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = os.read(fd, MAX_ENTRY_BYTES + 1)
    finally:
        os.close(fd)
    try:
        entry = json.loads(raw) if len(raw) <= MAX_ENTRY_BYTES else None
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


def _files(entry: dict[str, Any]) -> list[dict[str, Any]]:
    files = entry.get("files")
    return [f for f in files if isinstance(f, dict)] if isinstance(files, list) else []


def _remove_recorded(recorded: dict[str, Any]) -> str | None:
    """Remove the recorded file or folder if it is still that one; its path, or None."""
    path, dev, ino = recorded.get("path"), recorded.get("dev"), recorded.get("ino")
    if not (isinstance(path, str) and os.path.isabs(path)):
        return None
    parent, name = os.path.split(path)
    try:
        parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        found = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        folder = bool(recorded.get("folder"))
        kind = stat.S_ISDIR if folder else stat.S_ISREG
        if (found.st_dev, found.st_ino) != (dev, ino) or found.st_uid != os.getuid():
            return None
        if not kind(found.st_mode):
            return None
        if folder:
            shutil.rmtree(name, dir_fd=parent_fd)  # fd-based: never follows a link inside
        else:
            os.unlink(name, dir_fd=parent_fd)
    except OSError:
        return None
    finally:
        os.close(parent_fd)
    return path


def _unlink_at(folder: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=folder)
