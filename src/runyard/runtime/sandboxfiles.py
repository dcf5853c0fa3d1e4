"""The folder a sandboxed task writes, apart from its records.

A run-submitted task sees, as its task folder, ``<task folder>/.sandbox/``: its files go
there while it runs, and its records (``status.json``, ``metadata.json``, ``events.jsonl``,
the worker's lock) stay in the task folder itself, out of its reach. When the run ends its
files are moved up into the task folder (:func:`adopt_sandbox_files`), by the record keeper
or, when the keeper could not, by whoever records the run's end.

    sandbox = sandbox_dir(task_dir)
    adopt_sandbox_files(task_dir)      # after the run: files in place, .sandbox gone
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from pathlib import Path

from runyard.workspace.layout import EVENTS_FILE, METADATA_FILE, STATUS_FILE, WORKER_LOCK_FILE
from runyard.workspace.safefs import DIR_FLAGS

SANDBOX_DIR = ".sandbox"
# never taken from the sandbox, whatever it holds: the records are the keeper's to write,
# and the marks runyard keeps in a task folder (a cancel, the worker's lock, a submit's
# key, its staging names) are the server's to make
RESERVED = frozenset({
    STATUS_FILE, METADATA_FILE, EVENTS_FILE, SANDBOX_DIR, WORKER_LOCK_FILE, ".cancel",
    ".supervised", ".idempotency-key", ".sync-log",
})  # fmt: skip
RESERVED_PREFIXES = (".idempotency.", ".staging-", ".removing-", ".tmp-", ".runyard")
log = logging.getLogger(__name__)


def sandbox_dir(task_dir: Path) -> Path:
    return task_dir / SANDBOX_DIR


def adopt_sandbox_files(task_dir: Path) -> list[str]:
    """Move what the task left in its sandbox folder into its task folder; the names moved.

    Entries are renamed as they are (a symlink stays a link; nothing is followed), the
    record names and names the task folder already has are left behind, and the sandbox
    folder is removed with whatever is left in it. No sandbox folder: nothing to do.
    """
    try:
        folder = os.open(task_dir, DIR_FLAGS)
    except OSError:
        return []
    try:
        return _adopt(folder)
    finally:
        os.close(folder)


def _adopt(folder: int) -> list[str]:
    try:
        sandbox = os.open(SANDBOX_DIR, DIR_FLAGS, dir_fd=folder)
    except OSError:  # none, or a symlink in its place: nothing of the task's to take
        _remove(folder, SANDBOX_DIR)
        return []
    moved: list[str] = []
    try:
        for name in sorted(os.listdir(sandbox)):
            if name in RESERVED or name.startswith(RESERVED_PREFIXES) or _exists(folder, name):
                continue
            try:
                os.rename(name, name, src_dir_fd=sandbox, dst_dir_fd=folder)
            except OSError as exc:
                log.warning("Cannot move %r out of a sandbox folder: %s", name, exc)
                continue
            moved.append(name)
    finally:
        os.close(sandbox)
    _remove(folder, SANDBOX_DIR)
    os.fsync(folder)
    return moved


def _exists(folder: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _remove(folder: int, name: str) -> None:
    """Remove ``name`` of an open folder: a folder with all it holds (rmtree never follows
    a symlink), anything else itself."""
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(name, dir_fd=folder)
        else:
            os.unlink(name, dir_fd=folder)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("Cannot remove a sandbox folder: %s", exc)
