"""``create_backup``: one streamed tar of a workspace and its logs, taken while it runs.

    manifest = create_backup(Path(".runyard"), Path("logs"), Path("backup.tar.gz"))

Memory stays flat: each file is read in chunks straight into the tar stream (gzip when
the name ends ``.tar.gz``/``.tgz``). A file that grows while it is read (a running task's
log or events) is cut at the size it had when opened, one that shrinks is padded with
zeros and listed in ``changed_while_read``: the recorded sha256 is always that of the
bytes in the archive. SQLite stores (``agent/state.db``, ``.idempotency/keys.sqlite``)
are copied through SQLite's online backup API, so they are consistent while the server
writes. ``server.json`` (the server's token), ``server.lock``, the agent socket folder and
``.index`` (the index snapshot, keyed for this server) are left out. The archive is
written beside ``target`` and renamed into place when done; while it is written, it and the
scratch folder of the SQLite copies are journaled in the workspace, so a server's start
removes them if the backup is killed (:mod:`runyard.backup.partials`).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import stat
import tarfile
import tempfile
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from runyard.backup.errors import BackupError
from runyard.backup.manifest import (
    LOGS_PREFIX,
    MANIFEST_NAME,
    WORKSPACE_PREFIX,
    FileEntry,
    Manifest,
)
from runyard.backup.partials import PARTIALS_DIR, Journaled, record_partials
from runyard.backup.walk import FILE_FLAGS, Found, kind_of, walk
from runyard.faults import fault_point
from runyard.workspace.blobstore import store_held_if_any
from runyard.workspace.identity import TASK_TYPES
from runyard.workspace.layout import STATUS_FILE, WORKSPACE_FORMAT, Workspace
from runyard.workspace.records import utcnow

CHUNK = 1 << 20
MAX_STATUS_BYTES = 16 << 20
SQLITE_FILES = ("agent/state.db", ".idempotency/keys.sqlite")
LEFT_OUT = {
    "server.json": "server credentials (a new server writes its own)",
    "server.lock": "the running server's lock",
    "agent/sock": "the agent API socket folder",
    ".index": "the index snapshot and its key (a cache the server rebuilds from the records)",
    ".staging": "task folders of submits in progress (a task only once renamed into place)",
    ".claims": "the lock file of submits in progress",
    PARTIALS_DIR: "the journal of archives being written (runyard.backup.partials)",
    ".history/.staging": "copies of replaced runs in progress (kept once renamed into place)",
    ".history/.blobs/.lock": "the lock of the kept runs' file store",
}

Progress = Callable[[str, int], None]


class HashingReader:
    """Reads exactly ``size`` bytes of an open file, hashing what it hands out."""

    def __init__(self, fd: int, size: int, *, keep: bool = False) -> None:
        self.fd = fd
        self.left = size
        self.sha256 = hashlib.sha256()
        self.short = False
        self.kept: bytearray | None = bytearray() if keep else None

    def read(self, n: int = -1) -> bytes:
        want = self.left if n < 0 else min(n, self.left)
        parts = []
        got = 0
        while got < want:
            data = os.read(self.fd, min(want - got, CHUNK))
            if not data:  # the file shrank since it was opened: keep the promised size
                self.short = True
                data = bytes(want - got)
            parts.append(data)
            got += len(data)
        chunk = b"".join(parts)
        self.left -= len(chunk)
        self.sha256.update(chunk)
        if self.kept is not None:
            self.kept += chunk
        return chunk


def runyard_version() -> str:
    try:
        return version("runyard")
    except PackageNotFoundError:
        return "unknown"


def create_backup(
    workspace_dir: Path, log_dir: Path, target: Path, progress: Progress | None = None
) -> Manifest:
    """Write the backup of ``workspace_dir`` and ``log_dir`` to ``target``; its manifest."""
    workspace_dir, log_dir, target = (
        Path(os.path.abspath(p)) for p in (workspace_dir, log_dir, target)
    )
    for folder in (workspace_dir, log_dir):
        if target.is_relative_to(folder):
            raise BackupError(f"the archive {target} must not be inside {folder}")
    source = {"workspace_dir": str(workspace_dir), "log_dir": str(log_dir)}
    manifest = Manifest(runyard_version(), WORKSPACE_FORMAT, utcnow(), source)
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    journaled = Journaled(None)
    try:
        with (
            open(partial, "xb") as out,
            tempfile.TemporaryDirectory(prefix="runyard-backup-") as scratch,
        ):
            # a kill from here on leaves both: a server's start removes them by this entry
            journaled = record_partials(workspace_dir, [partial, Path(scratch)])
            mode = _mode_for(target)
            _write_archive(out, workspace_dir, log_dir, manifest, mode, Path(scratch), progress)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
        journaled.close()
    return manifest


def _mode_for(target: Path) -> str:
    return "w|gz" if target.name.endswith((".tar.gz", ".tgz")) else "w|"


def _write_archive(
    out: io.BufferedWriter, workspace_dir: Path, log_dir: Path, manifest: Manifest,
    mode: str, scratch: Path, progress: Progress | None,
) -> None:  # fmt: skip
    with tarfile.open(fileobj=out, mode=mode) as tar:  # type: ignore[call-overload]
        writer = _Writer(tar, manifest, progress)
        writer.add_sqlite_copies(workspace_dir, scratch)
        fault_point("backup.partial")  # an archive and the SQLite copies half made
        ws_skip = _skip_rule(WORKSPACE_PREFIX, workspace_dir, log_dir, LOGS_PREFIX)
        # kept runs' files move into the blob store meanwhile: held still, every blob a
        # manifest names is in the archive (or the file still in its entry)
        with store_held_if_any(Workspace(workspace_dir, log_dir)):
            for found in walk(workspace_dir, WORKSPACE_PREFIX, ws_skip, manifest):
                writer.add(found)
        log_skip = _skip_rule(LOGS_PREFIX, log_dir, workspace_dir, WORKSPACE_PREFIX)
        for found in walk(log_dir, LOGS_PREFIX, log_skip, manifest):
            writer.add(found)
        writer.add_bytes(MANIFEST_NAME, manifest.to_bytes())


def _skip_rule(
    prefix: str, root: Path, other: Path, other_prefix: str
) -> Callable[[str], str | None]:
    nested = f"{prefix}/{os.path.relpath(other, root)}" if other.is_relative_to(root) else None
    sqlite_names = {f"{prefix}/{name}{suffix}" for name in SQLITE_FILES
                    for suffix in ("", "-wal", "-shm", "-journal")}  # fmt: skip
    left_out = {f"{prefix}/{name}": why for name, why in LEFT_OUT.items()}

    def skip(path: str) -> str | None:
        if path == nested:
            return f"archived under {other_prefix}/"
        if prefix == WORKSPACE_PREFIX and path in sqlite_names:
            return "copied through SQLite's online backup"
        return left_out.get(path) if prefix == WORKSPACE_PREFIX else None

    return skip


class _Writer:
    def __init__(self, tar: tarfile.TarFile, manifest: Manifest, progress: Progress | None):
        self.tar = tar
        self.manifest = manifest
        self.progress = progress

    def add(self, found: Found) -> None:
        if found.is_dir:
            self._add_dir(found)
            return
        try:
            fd = os.open(found.name, FILE_FLAGS, dir_fd=found.fd)
        except FileNotFoundError:  # replaced or removed since it was listed
            return
        except OSError as exc:
            self.manifest.skip(found.arcname, f"not readable ({exc.strerror})")
            return
        try:
            self._add_file(found.arcname, fd)
        finally:
            os.close(fd)

    def _add_dir(self, found: Found) -> None:
        info = tarfile.TarInfo(found.arcname)
        st = os.fstat(found.fd)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, stat.S_IMODE(st.st_mode), st.st_mtime
        self.tar.addfile(info)
        self.manifest.dirs.append({"path": found.arcname, "mode": info.mode})

    def _add_file(self, arcname: str, fd: int) -> None:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped for something else after it was listed
            self.manifest.skip(arcname, kind_of(st.st_mode))
            return
        keep = _is_task_status(arcname) and st.st_size <= MAX_STATUS_BYTES
        reader = HashingReader(fd, st.st_size, keep=keep)
        info = tarfile.TarInfo(arcname)
        info.size, info.mode, info.mtime = st.st_size, stat.S_IMODE(st.st_mode), st.st_mtime
        self.tar.addfile(info, reader)
        self.manifest.files.append(
            FileEntry(arcname, st.st_size, reader.sha256.hexdigest(), info.mode)
        )
        if reader.short:
            self.manifest.changed_while_read.append(arcname)
        if reader.kept is not None and _was_running(bytes(reader.kept)):
            self.manifest.running_tasks.append(arcname.split("/")[2])
        if self.progress is not None:
            self.progress(arcname, st.st_size)

    def add_bytes(self, arcname: str, data: bytes) -> None:
        info = tarfile.TarInfo(arcname)
        info.size, info.mode, info.mtime = len(data), 0o600, 0
        self.tar.addfile(info, io.BytesIO(data))

    def add_sqlite_copies(self, workspace_dir: Path, scratch: Path) -> None:
        for number, rel in enumerate(SQLITE_FILES):
            source = workspace_dir / rel
            copy = scratch / f"{number}.sqlite"
            if _online_copy(source, copy):
                fd = os.open(copy, FILE_FLAGS)
                try:
                    self._add_file(f"{WORKSPACE_PREFIX}/{rel}", fd)
                finally:
                    os.close(fd)


def _online_copy(source: Path, copy: Path) -> bool:
    """Copy a live SQLite database through its backup API; False when there is none."""
    try:
        if not stat.S_ISREG(os.lstat(source).st_mode):
            return False
    except FileNotFoundError:
        return False
    src = sqlite3.connect(source, timeout=30.0)
    dst = sqlite3.connect(copy)
    try:
        src.backup(dst)
    except sqlite3.Error as exc:
        raise BackupError(f"cannot copy {source}: {exc}") from exc
    finally:
        dst.close()
        src.close()
    return True


def _is_task_status(arcname: str) -> bool:
    parts = arcname.split("/")
    return (
        len(parts) == 4 and parts[0] == WORKSPACE_PREFIX and parts[1] in TASK_TYPES
        and parts[2].startswith(f"{parts[1]}#") and parts[3] == STATUS_FILE
    )  # fmt: skip


def _was_running(raw: bytes) -> bool:
    try:
        data = json.loads(raw)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("state") == "running"
