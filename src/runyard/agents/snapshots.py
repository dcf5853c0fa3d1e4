"""Snapshots of a session's state folder, taken when a run ends, and restoring them.

::

    <agent root>/snapshots/<session-id>/<run-id>/manifest.json   files, sizes, sha256, totals
    <agent root>/snapshots/<session-id>/<run-id>/files/...       the state folder as it was
    <agent root>/snapshots/<session-id>/.staging-<run-id>        a snapshot being taken

A snapshot is built in a staging folder and renamed into place once its manifest is
written and synced, so a server killed half-way leaves only a staging folder, which the
next server sweeps (:meth:`Snapshots.sweep`) before it settles any run. Each file is
cloned (``FICLONE``: copy-on-write on btrfs/XFS) or else copied — never hard-linked, since
a later in-place write by a run would change the snapshot too.

The state folder is written by runs, so it is read the way everything a run can write is
read: walked with :func:`os.fwalk` without following symlinks, each file opened
``O_NOFOLLOW | O_NONBLOCK`` relative to its folder and checked with ``fstat``. Symlinks,
FIFOs, sockets and devices are not taken; the manifest lists them under ``skipped``.
Restoring writes into the state folder through descriptors only (folders made with the
run's ownership by :meth:`Ownership.make_dir_at`, files created ``O_EXCL | O_NOFOLLOW``).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runyard.agents.errors import AgentConflict, AgentNotFound
from runyard.agents.ids import check_agent_id
from runyard.agents.layout import DIR_FLAGS, NOT_A_FOLDER, Ownership, open_folder
from runyard.agents.placement import FICLONE, NO_CLONE, _copy_fds
from runyard.workspace.filenames import entry_from_json, entry_to_json, is_text_name, shown_name
from runyard.workspace.records import utcnow

log = logging.getLogger("runyard.agents.snapshots")
MANIFEST = "manifest.json"
FILES = "files"
STAGING = ".staging-"
MANIFEST_VERSION = 1
SNAPSHOT_MODE = 0o750
# tests only: seconds to pause after the files are copied, before the manifest is written
FAULT_PAUSE_ENV = "RUNYARD_SNAPSHOT_FAULT_PAUSE"
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CREATE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
CHUNK = 1 << 20


class TooLarge(Exception):
    """The state folder holds more than the configured ``max_mb``."""


@dataclass
class Taken:
    """What one snapshot holds, as its manifest records it."""

    files: list[dict[str, Any]] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    bytes: int = 0
    methods: set[str] = field(default_factory=set)


def clone_or_copy(src_fd: int, dst_fd: int, size: int) -> str:
    """Make ``dst_fd`` hold ``src_fd``'s first ``size`` bytes: ``reflink`` or ``copy``."""
    try:
        fcntl.ioctl(dst_fd, FICLONE, src_fd)
    except OSError as exc:
        if exc.errno not in NO_CLONE:
            raise
    else:
        os.ftruncate(dst_fd, size)  # the source may have grown since its fstat
        return "reflink"
    _copy_fds(src_fd, dst_fd, size)
    return "copy"


def sha256_of(fd: int) -> str:
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, CHUNK, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


class Snapshots:
    def __init__(self, root: Path, max_bytes: int, keep_last: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.keep_last = keep_last

    def session_dir(self, session_id: str) -> Path:
        return self.root / check_agent_id(session_id, "session")

    def snapshot_dir(self, session_id: str, run_id: str) -> Path:
        return self.session_dir(session_id) / check_agent_id(run_id, "run")

    def files_dir(self, session_id: str, run_id: str) -> Path:
        return self.snapshot_dir(session_id, run_id) / FILES

    # taking
    def take(self, state_dir: Path, session_id: str, run_id: str) -> dict[str, Any]:
        """Snapshot ``state_dir`` for ``run_id``; answers the run's checkpoint record."""
        try:
            state_fd = open_folder(state_dir)
        except FileNotFoundError:
            return skipped("The session has no state folder")
        try:
            return self._take(state_fd, session_id, run_id)
        except TooLarge:
            limit = self.max_bytes >> 20
            return skipped(f"The state folder is larger than state_snapshots.max_mb ({limit})")
        finally:
            os.close(state_fd)

    def _take(self, state_fd: int, session_id: str, run_id: str) -> dict[str, Any]:
        self.root.mkdir(mode=SNAPSHOT_MODE, exist_ok=True)
        self.session_dir(session_id).mkdir(mode=SNAPSHOT_MODE, exist_ok=True)
        staging = self.session_dir(session_id) / f"{STAGING}{check_agent_id(run_id, 'run')}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(mode=SNAPSHOT_MODE)
        try:
            taken = self._copy_tree(state_fd, staging / FILES)
            _fault_pause()
            created = utcnow()
            _write_manifest(staging, _manifest(session_id, run_id, created, taken))
            final = self.snapshot_dir(session_id, run_id)
            shutil.rmtree(final, ignore_errors=True)
            os.rename(staging, final)
            _sync_dir(final.parent)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return present(run_id, created, taken)

    def _copy_tree(self, state_fd: int, target: Path) -> Taken:
        taken = Taken()
        target.mkdir(mode=SNAPSHOT_MODE)
        for top, dirs, names, dir_fd in os.fwalk(".", dir_fd=state_fd, follow_symlinks=False):
            relative = os.path.normpath(top)
            base = "" if relative == "." else relative + "/"
            for name in list(dirs):
                if _kind(dir_fd, name) != "folder":
                    dirs.remove(name)  # fwalk would not descend into it; say so anyway
                    taken.skipped.append({"path": base + name, "kind": _kind(dir_fd, name)})
                    continue
                (target / (base + name)).mkdir(mode=SNAPSHOT_MODE)
                taken.dirs.append(base + name)
            for name in names:
                self._copy_one(dir_fd, name, base + name, target, taken)
        return taken

    def _copy_one(self, dir_fd: int, name: str, relative: str, target: Path, taken: Taken) -> None:
        try:
            src = os.open(name, READ_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOENT, errno.ENXIO):
                raise
            taken.skipped.append({"path": relative, "kind": _kind(dir_fd, name)})
            return
        try:
            info = os.fstat(src)
            if not stat.S_ISREG(info.st_mode):
                taken.skipped.append({"path": relative, "kind": _describe_mode(info.st_mode)})
                return
            if taken.bytes + info.st_size > self.max_bytes:
                raise TooLarge(relative)
            dst = os.open(target / relative, CREATE_FLAGS, 0o640)
            try:
                taken.methods.add(clone_or_copy(src, dst, info.st_size))
                digest = sha256_of(dst)
            finally:
                os.close(dst)
        finally:
            os.close(src)
        mode = stat.S_IMODE(info.st_mode) & 0o777
        taken.files.append({"path": relative, "size": info.st_size, "sha256": digest, "mode": mode})
        taken.bytes += info.st_size

    # reading
    def manifest(self, session_id: str, run_id: str) -> dict[str, Any]:
        path = self.snapshot_dir(session_id, run_id) / MANIFEST
        try:
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise AgentNotFound("checkpoint of run", run_id) from None
        return data

    # restoring
    def restore_into(
        self, session_id: str, run_id: str, state_dir: Path, owner: Ownership
    ) -> dict[str, Any]:
        """Make ``state_dir`` hold exactly the snapshot of ``run_id`` (owned by the run user).

        Whatever the folder holds is removed first (entries themselves; symlinks are never
        followed), then the snapshot's folders and files are created through descriptors.
        """
        manifest = self.manifest(session_id, run_id)
        source = self.files_dir(session_id, run_id)
        state_fd = open_folder(state_dir)
        try:
            _empty(state_fd)
            for relative in manifest["dirs"]:
                os.close(_make_dirs(state_fd, _dir_from_json(relative).split("/"), owner))
            for entry in manifest["files"]:
                _restore_file(source, entry_from_json(entry), state_fd, owner)
        finally:
            os.close(state_fd)
        return manifest

    # retention
    def remove(self, session_id: str, run_id: str) -> None:
        shutil.rmtree(self.snapshot_dir(session_id, run_id), ignore_errors=True)

    def sweep(self) -> list[str]:
        """Remove the staging folders a killed server left; their ``<session>/<name>``."""
        removed: list[str] = []
        if not self.root.is_dir():
            return removed
        for session in os.scandir(self.root):
            if not session.is_dir(follow_symlinks=False):
                continue
            for entry in os.scandir(session.path):
                if entry.name.startswith(STAGING):
                    shutil.rmtree(entry.path, ignore_errors=True)
                    removed.append(f"{session.name}/{entry.name}")
        return sorted(removed)


def present(run_id: str, created_at: str, taken: Taken) -> dict[str, Any]:
    record: dict[str, Any] = {
        "state": "present",
        "runId": run_id,
        "createdAt": created_at,
        "files": len(taken.files),
        "bytes": taken.bytes,
        "method": "reflink" if taken.methods == {"reflink"} else "copy",
    }
    if taken.skipped:
        record["skipped"] = [
            {**entry, "path": shown_name(entry["path"])} for entry in taken.skipped
        ]
    return record


def skipped(reason: str) -> dict[str, Any]:
    return {"state": "skipped", "reason": reason, "createdAt": utcnow()}


def _manifest(session_id: str, run_id: str, created: str, taken: Taken) -> dict[str, Any]:
    return {
        "version": MANIFEST_VERSION,
        "sessionId": session_id,
        "runId": run_id,
        "createdAt": created,
        "files": [entry_to_json(f) for f in sorted(taken.files, key=lambda f: f["path"])],
        "dirs": [_dir_to_json(relative) for relative in sorted(taken.dirs)],
        "skipped": [entry_to_json(entry) for entry in taken.skipped],
        "totals": {"files": len(taken.files), "bytes": taken.bytes},
    }


def _dir_to_json(relative: str) -> str | dict[str, Any]:
    """A folder of ``dirs``: its path, or where it is not UTF-8 an entry with ``path_hex``
    (:mod:`runyard.workspace.filenames`)."""
    return relative if is_text_name(relative) else entry_to_json({"path": relative})


def _dir_from_json(entry: str | dict[str, Any]) -> str:
    return entry if isinstance(entry, str) else str(entry_from_json(entry)["path"])


def _write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    fd = os.open(folder / MANIFEST, CREATE_FLAGS, 0o640)
    try:
        os.write(fd, json.dumps(manifest, ensure_ascii=False, indent=1).encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(path: Path) -> None:
    fd = os.open(path, DIR_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fault_pause() -> None:
    pause = os.environ.get(FAULT_PAUSE_ENV)
    if pause:
        time.sleep(float(pause))


def _kind(dir_fd: int, name: str) -> str:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return "vanished"
    return _describe_mode(info.st_mode)


def _describe_mode(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISREG(mode):
        return "file"
    return "special"


def _empty(folder_fd: int) -> None:
    with os.scandir(folder_fd) as entries:
        found = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for name, is_dir in found:
        if is_dir:
            shutil.rmtree(name, dir_fd=folder_fd)  # fd-based: never leaves the folder
        else:
            os.unlink(name, dir_fd=folder_fd)


def _make_dirs(root_fd: int, parts: list[str], owner: Ownership) -> int:
    """``root_fd/parts...`` made (run ownership) and opened, never through a symlink."""
    folder = os.dup(root_fd)
    for part in parts:
        try:
            child = owner.make_dir_at(folder, part)
        except OSError as exc:
            if exc.errno in NOT_A_FOLDER:
                raise AgentConflict(f"state/{part} is not a folder; not followed") from exc
            raise
        finally:
            os.close(folder)
        folder = child
    return folder


def _restore_file(source: Path, entry: dict[str, Any], state_fd: int, owner: Ownership) -> None:
    parts = entry["path"].split("/")
    folder = _make_dirs(state_fd, parts[:-1], owner)
    try:
        src = os.open(source / entry["path"], READ_FLAGS)
        try:
            dst = os.open(parts[-1], CREATE_FLAGS, 0o600, dir_fd=folder)
            try:
                clone_or_copy(src, dst, entry["size"])
                owner.apply_fd(dst, entry["mode"] | 0o600)
            finally:
                os.close(dst)
        finally:
            os.close(src)
    finally:
        os.close(folder)
