"""Keeping a repository's index snapshot (:mod:`runyard.repository.snapshot`) in step.

At start, :meth:`SnapshotKeeper.initial` gives what the index loads: each listed folder
from the snapshot when its stamp still matches, read again otherwise (by the shared scan).
Then a thread writes the snapshot once the index is ready (unless the one loaded was
still right in every entry), again every :data:`CHECK_SECONDS` when :data:`CHANGES_MIN`
tasks changed (or one in :data:`CHANGES_SHARE` of them, if that is fewer), and once more
at a clean stop when one in :data:`STOP_SHARE` did.

A written entry pairs a stamp with the records read just after it: those the index holds
for a task unchanged since they were read (the repository reports every change under the
index lock, :meth:`changed`), those of a fresh read for any other.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from array import array
from collections.abc import Iterator

from runyard.faults import fault_delay
from runyard.repository.index import TaskIndex
from runyard.repository.records import FolderRecords, TaskFolder
from runyard.repository.scan import (
    Progress,
    Scanned,
    collect_stamps,
    scan_stamped,
    start_stamping,
)
from runyard.repository.snapshot import (
    CHUNK_ENTRIES,
    RACY,
    RACY_NS,
    Columns,
    Refused,
    SnapshotStore,
    Stamper,
)

log = logging.getLogger(__name__)

CHECK_SECONDS = 30.0
CHANGES_MIN = 10_000
CHANGES_SHARE = 20
STOP_SHARE = 100
_BATCH = 1000
_REFUSALS = (Refused, OSError, ValueError, EOFError, TypeError)


class SnapshotKeeper:
    """Loads, then keeps writing, the snapshot of one index (see the module docstring)."""

    def __init__(self, store: SnapshotStore, index: TaskIndex, since_ns: int) -> None:
        """``since_ns``: when the listing of the folders began (records modified after,
        or less than :data:`RACY_NS` before, are read again)."""
        self._store = store
        self._index = index
        self._since_ns = since_ns
        self._key = b""
        self._ids: list[str] = []  # the entries of the last snapshot, and their stamps
        self._stamps = array("q")
        self._dirty: set[str] = set()
        self._stale = True  # the snapshot on disk is not the last one made
        self._use_snapshot = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._writing = threading.Lock()

    def anew(self, index: TaskIndex) -> SnapshotKeeper:
        """A keeper for ``index`` that will not load the snapshot (its records did not fit)."""
        keeper = SnapshotKeeper(self._store, index, self._since_ns)
        keeper._use_snapshot = False
        return keeper

    def initial(self, folders: list[TaskFolder], on_scanned: Progress) -> Scanned:
        """``(task_id, FolderRecords)`` of every folder: from the snapshot where right."""
        try:
            self._key = self._store.key(create=True)
            self._store.sweep()
        except _REFUSALS as exc:
            log.warning("no index snapshot: %s", exc)
            self._key = b""
        stamper = self._store.stamper(self._key, self._since_ns - RACY_NS)
        cached = self._cached() if self._key and self._use_snapshot else None
        found: Scanned = []
        stamps = array("q")
        unread = folders
        if cached is not None:
            unread = self._reuse_all(folders, cached, stamper, (found, stamps), on_scanned)
        for task_id, records, stamp in scan_stamped(unread, stamper, on_scanned=on_scanned):
            found.append((task_id, records))
            stamps.append(stamp)
        self._ids = [task_id for task_id, _ in found]
        self._stamps = stamps
        self._stale = cached is None or bool(unread) or len(cached[0]) != len(found)
        return found

    def unchanged(self, task_ids: set[str], folders: list[TaskFolder]) -> set[str]:
        """Which of ``task_ids`` (of ``folders``) are as they were when read at start: their
        stamp (not racy) is the same now (two ``lstat`` each instead of a read)."""
        kept = {
            task_id: self._stamps[at]
            for at, task_id in enumerate(self._ids)
            if task_id in task_ids and self._stamps[at] != RACY
        }
        stamper = self._store.stamper(self._key, self._since_ns - RACY_NS)
        return {
            task_id
            for task_id, path, inode in folders
            if task_id in kept and kept[task_id] == stamper.stamp_now(path, inode)
        }

    def _cached(self) -> tuple[dict[str, int], Columns] | None:
        """The snapshot's entries (a position for each id, and the columns), or None."""
        try:
            columns = Columns([], [], [], [])
            for chunk in self._store.load(self._key):
                for whole, part in zip(columns, chunk, strict=True):
                    whole.extend(part)  # type: ignore[attr-defined]
        except FileNotFoundError:
            return None
        except _REFUSALS as exc:
            log.warning("the index snapshot is not used: %s", exc)
            return None
        if len({len(column) for column in columns}) != 1:
            log.warning("the index snapshot is not used: its columns differ in length")
            return None
        return {task_id: at for at, task_id in enumerate(columns.ids)}, columns

    @staticmethod
    def _reuse_all(
        folders: list[TaskFolder],
        cached: tuple[dict[str, int], Columns],
        stamper: Stamper,
        into: tuple[Scanned, array[int]],
        on_scanned: Progress,
    ) -> list[TaskFolder]:
        """Take from the snapshot the folders whose stamp is the same now (a helper
        stamps a share of them meanwhile, when there are many); the others, to be read."""
        split, helper = start_stamping(folders, stamper)
        unread: list[TaskFolder] = []
        for start in range(0, split, _BATCH):
            batch = folders[start : min(start + _BATCH, split)]
            now = [stamper.stamp_now(path, inode) for _, path, inode in batch]
            left = _reuse(batch, now, cached, into)
            on_scanned(len(batch) - len(left))  # the others count as they are read
            unread += left
            fault_delay("index.batch")
        theirs = collect_stamps(helper, folders[split:], stamper)
        left = _reuse(folders[split:], theirs, cached, into)
        on_scanned(len(folders) - split - len(left))
        return unread + left

    def changed(self, task_id: str) -> None:
        """The index changed ``task_id``'s records (called under the index lock)."""
        self._dirty.add(task_id)

    def begin(self) -> None:
        """Write the snapshot now if it is not right, then keep it up to date, in a thread."""
        if not self._key:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="runyard-snapshot", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread; write the snapshot if enough changed since the last."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join()
        if self._stale or len(self._dirty) * STOP_SHARE >= max(len(self._ids), 1):
            self.write()

    def _run(self) -> None:
        if self._stale:
            self.write()
        while not self._stop.wait(CHECK_SECONDS):
            if len(self._dirty) >= min(CHANGES_MIN, max(len(self._ids) // CHANGES_SHARE, 1)):
                self.write()

    def write(self) -> bool:
        """Write the snapshot of the index as it is; False (logged) when it could not be."""
        with self._writing:
            with self._index.lock:
                taken, self._dirty = self._dirty, set()
            ids: list[str] = []
            stamps = array("q")
            started = time.monotonic()
            try:
                self._store.write(self._key, self._columns(taken, ids, stamps))
            except _REFUSALS as exc:
                log.warning("the index snapshot could not be written: %s", exc)
                with self._index.lock:
                    self._dirty |= taken
                return False
            self._ids, self._stamps, self._stale = ids, stamps, False
            log.info("index snapshot of %d folders written in %.1f s", len(ids),
                     time.monotonic() - started)  # fmt: skip
            return True

    def _columns(self, taken: set[str], ids: list[str], stamps: array[int]) -> Iterator[Columns]:
        """The entries: the unchanged ones as the index holds them, then the others read
        again; ``ids`` and ``stamps`` receive what was written."""
        again = set(taken)
        active = self._index.active_ids()
        for start in range(0, len(self._ids), CHUNK_ENTRIES):
            columns = Columns([], [], [], [])
            with self._index.lock:
                for at in range(start, min(start + CHUNK_ENTRIES, len(self._ids))):
                    task_id = self._ids[at]
                    if task_id in again or task_id in self._dirty:
                        again.add(task_id)
                        continue
                    status = self._index.statuses.get(task_id)
                    meta = self._index.metadata.get(task_id)
                    if status is None and meta is None and task_id not in active:
                        continue  # its folder went
                    _add(columns, task_id, self._stamps[at], FolderRecords(True, status, meta))
            yield from _kept(columns, ids, stamps)
        yield from self._read_again(sorted(again), ids, stamps)

    def _read_again(
        self, task_ids: list[str], ids: list[str], stamps: array[int]
    ) -> Iterator[Columns]:
        stamper = self._store.stamper(self._key, time.time_ns() - RACY_NS)
        root = str(self._store.root)
        for start in range(0, len(task_ids), CHUNK_ENTRIES):
            columns = Columns([], [], [], [])
            for task_id in task_ids[start : start + CHUNK_ENTRIES]:
                path = os.path.join(root, task_id[: task_id.find("#")], task_id)
                inode = _folder_inode(path)
                if inode is not None:
                    _add(columns, task_id, *_swap(stamper.capture(path, task_id, inode)))
            yield from _kept(columns, ids, stamps)


def _reuse(
    batch: list[TaskFolder],
    now: list[int],
    cached: tuple[dict[str, int], Columns],
    into: tuple[Scanned, array[int]],
) -> list[TaskFolder]:
    """Take the folders of ``batch`` whose stamp kept is ``now``'s; the others, to be read."""
    positions, columns = cached
    found, stamps = into
    unread = []
    for folder, stamp in zip(batch, now, strict=True):
        task_id = folder[0]
        at = positions.get(task_id, -1)
        kept = RACY if at < 0 else columns.stamps[at]
        if kept != RACY and kept == stamp:
            found.append((task_id, FolderRecords(True, columns.statuses[at], columns.metadata[at])))
            stamps.append(kept)
        else:
            unread.append(folder)
    return unread


def _swap(captured: tuple[FolderRecords, int]) -> tuple[int, FolderRecords]:
    return captured[1], captured[0]


def _add(columns: Columns, task_id: str, stamp: int, records: FolderRecords) -> None:
    columns.ids.append(task_id)
    columns.stamps.append(stamp)
    columns.statuses.append(records.status)
    columns.metadata.append(records.metadata)


def _kept(columns: Columns, ids: list[str], stamps: array[int]) -> Iterator[Columns]:
    if columns.ids:
        ids.extend(columns.ids)
        stamps.extend(columns.stamps)
        yield columns


def _folder_inode(path: str) -> int | None:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return info.st_ino if stat.S_ISDIR(info.st_mode) else None
