"""Keeping a repository's index snapshot (:mod:`runyard.repository.snapshot`) in step.

At start, :meth:`SnapshotKeeper.initial` gives what the index loads: the snapshot's
entries whose folder's stamp still matches, with their arrangement
(:mod:`runyard.repository.arrangement`), and the other listed folders, read again (by
the shared scan). Then a thread writes the snapshot when the changes since the one on disk
(the folders read again or gone at start, and the tasks changed since) reach
:data:`CHANGES_MIN` (or one in :data:`CHANGES_SHARE` of the tasks, if that is fewer): at
once when the start found that many (or no snapshot), then checked every
:data:`CHECK_SECONDS`; and once more at a clean stop when one in :data:`STOP_SHARE` did.
A few changes are not worth rewriting a million entries for: until then a start reads
those folders again.

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
from itertools import compress, repeat
from operator import and_, eq, itemgetter, not_, or_
from typing import NamedTuple

from runyard.faults import fault_delay
from runyard.repository.arrangement import (
    Arrangement,
    Arranger,
    Kept,
    ascending,
    mostly_ascending,
)
from runyard.repository.index import TaskIndex
from runyard.repository.records import INSTANT, TaskFolder
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


class Loaded(NamedTuple):
    """What the index starts from: the entries kept from the snapshot (None without
    one), and the folders read."""

    kept: Kept | None
    read: Scanned


class _Cached(NamedTuple):
    columns: Columns
    positions: dict[str, int]  # of each id among the entries
    arrangement: Arrangement
    stamps: list[int | None]  # of the entries, then None: the stamp of no entry


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
        self._unsaved = 0  # entries the snapshot on disk lacks, beside the dirty ones
        self._stale = True  # write at once
        self._in_order = True  # the entries are in list order, the ones without a status last
        self._use_snapshot = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._writing = threading.Lock()

    def anew(self, index: TaskIndex) -> SnapshotKeeper:
        """A keeper for ``index`` that will not load the snapshot (its records did not fit)."""
        keeper = SnapshotKeeper(self._store, index, self._since_ns)
        keeper._use_snapshot = False
        return keeper

    def initial(self, folders: list[TaskFolder], on_scanned: Progress) -> Loaded:
        """The snapshot's entries still right for ``folders``, and the others read."""
        try:
            self._key = self._store.key(create=True)
            self._store.sweep()
        except _REFUSALS as exc:
            log.warning("no index snapshot: %s", exc)
            self._key = b""
        stamper = self._store.stamper(self._key, self._since_ns - RACY_NS)
        cached = self._cached() if self._key and self._use_snapshot else None
        if cached is None:
            read = self._read(folders, stamper, on_scanned)
            self._stale = True
            self._in_order = False
            return Loaded(None, read)
        columns, positions, arrangement, _ = cached
        keep = bytearray(len(columns.ids))
        unread = self._reuse_all(folders, cached, stamper, keep, on_scanned)
        self._ids = list(compress(columns.ids, keep))
        self._stamps = array("q", compress(columns.stamps, keep))
        read = self._read(unread, stamper, on_scanned)
        dropped = len(keep) - keep.count(1)
        self._unsaved = dropped + sum(1 for task_id, _ in read if task_id not in positions)
        self._in_order = mostly_ascending(arrangement.order)
        self._stale = self._unsaved >= _worth_writing(len(self._ids)) or not self._in_order
        kept = Kept(columns.ids, columns.statuses, columns.metadata, keep, arrangement)
        return Loaded(kept, read)

    def _read(self, folders: list[TaskFolder], stamper: Stamper, on_scanned: Progress) -> Scanned:
        read: Scanned = []
        for task_id, records, stamp in scan_stamped(folders, stamper, on_scanned=on_scanned):
            read.append((task_id, records))
            self._ids.append(task_id)
            self._stamps.append(stamp)
        return read

    def unchanged(self, task_ids: set[str], folders: list[TaskFolder]) -> set[str]:
        """Which of ``task_ids`` (of ``folders``) are as they were when read at start: their
        stamp (not racy) is the same now (two ``lstat`` each instead of a read)."""
        kept = {
            task_id: self._stamps[at]
            for at, task_id in enumerate(self._ids)
            if task_id in task_ids and self._stamps[at] != RACY
        }
        stamper = self._store.stamper(self._key, self._since_ns - RACY_NS)
        folders = [folder for folder in folders if folder[0] in kept]
        now = stamper.stamps_now((path, inode) for _, path, inode in folders)
        return {task_id for (task_id, _, _), stamp in zip(folders, now, strict=True)
                if kept[task_id] == stamp}  # fmt: skip

    def _cached(self) -> _Cached | None:
        """The snapshot's entries, a position for each id, and their arrangement; None
        without a usable snapshot."""
        try:
            columns = Columns([], [], [], [])
            arrangement = None
            for chunk in self._store.load(self._key):
                if isinstance(chunk, Arrangement):
                    arrangement = chunk
                    continue
                for whole, part in zip(columns, chunk, strict=True):
                    whole.extend(part)  # type: ignore[attr-defined]
        except FileNotFoundError:
            return None
        except _REFUSALS as exc:
            log.warning("the index snapshot is not used: %s", exc)
            return None
        if len({len(column) for column in columns}) != 1 or arrangement is None:
            log.warning("the index snapshot is not used: its columns differ in length")
            return None
        positions = {task_id: at for at, task_id in enumerate(columns.ids)}
        return _Cached(columns, positions, arrangement, [*columns.stamps, None])

    @staticmethod
    def _reuse_all(
        folders: list[TaskFolder],
        cached: _Cached,
        stamper: Stamper,
        keep: bytearray,
        on_scanned: Progress,
    ) -> list[TaskFolder]:
        """Mark in ``keep`` the entries whose folder's stamp is the same now (a helper
        stamps a share of them meanwhile, when there are many); the folders to read."""
        split, helper = start_stamping(folders, stamper)
        unread: list[TaskFolder] = []
        for start in range(0, split, _BATCH):
            batch = folders[start : min(start + _BATCH, split)]
            now = stamper.stamps_now((path, inode) for _, path, inode in batch)
            left = _reuse(batch, now, cached, keep)
            on_scanned(len(batch) - len(left))  # the others count as they are read
            unread += left
            fault_delay("index.batch")
        theirs = collect_stamps(helper, folders[split:], stamper)
        left = _reuse(folders[split:], theirs, cached, keep)
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
        if self._stale or self._changes() * STOP_SHARE >= max(len(self._ids), 1):
            self.write()

    def _run(self) -> None:
        if self._stale:
            self.write()
        while not self._stop.wait(CHECK_SECONDS):
            if self._changes() >= _worth_writing(len(self._ids)):
                self.write()

    def _changes(self) -> int:
        return len(self._dirty) + self._unsaved

    def write(self) -> bool:
        """Write the snapshot of the index as it is; False (logged) when it could not be."""
        with self._writing:
            with self._index.lock:
                taken, self._dirty = self._dirty, set()
                unsaved, self._unsaved = self._unsaved, 0
            if not self._in_order:
                self._put_in_order()
            written = _Written()
            started = time.monotonic()
            try:
                chunks = self._columns(taken, written)
                self._store.write(self._key, chunks, written.arranger.arrangement)
            except _REFUSALS as exc:
                log.warning("the index snapshot could not be written: %s", exc)
                with self._index.lock:
                    self._dirty |= taken
                    self._unsaved += unsaved
                return False
            in_order = written.arranger.in_order()
            self._ids = list(map(written.ids.__getitem__, in_order))
            self._stamps = array("q", map(written.stamps.__getitem__, in_order))
            self._stale = False
            log.info("index snapshot of %d folders written in %.1f s", len(self._ids),
                     time.monotonic() - started)  # fmt: skip
            return True

    def _put_in_order(self) -> None:
        """The entries in list order (as the index has them), then those without a
        status: written so, the arrangement is found without sorting, and a start takes
        them from memory in order (several times faster than in the listing's)."""
        statuses = [self._index.statuses.get(task_id) for task_id in self._ids]
        ranked = [at for at, status in enumerate(statuses) if status is not None]
        instants = [status[INSTANT] for status in statuses if status is not None]
        ranks = ascending(instants, list(map(self._ids.__getitem__, ranked)))
        sequence = [*map(ranked.__getitem__, ranks)]
        sequence += [at for at, status in enumerate(statuses) if status is None]
        self._ids = list(map(self._ids.__getitem__, sequence))
        self._stamps = array("q", map(self._stamps.__getitem__, sequence))
        self._in_order = True

    def _columns(self, taken: set[str], written: _Written) -> Iterator[Columns]:
        """The entries: each as the index holds it, or read again where it changed (in
        its place), then the new ones, read."""
        pending = set(taken)  # changed: read again, not taken from the index
        active = self._index.active_ids()
        for start in range(0, len(self._ids), CHUNK_ENTRIES):
            columns, changed = self._chunk(start, pending)
            gone = [
                at
                for at in compress(range(len(columns.ids)), map(not_, columns.statuses))
                if columns.metadata[at] is None and not changed[at]
                and columns.ids[at] not in active
            ]  # fmt: skip
            yield from written.take(self._read_into(columns, changed, gone))
        task_ids = sorted(pending)
        for start in range(0, len(task_ids), CHUNK_ENTRIES):
            batch = task_ids[start : start + CHUNK_ENTRIES]
            columns = Columns(batch, [RACY] * len(batch), [None] * len(batch), [None] * len(batch))
            yield from written.take(self._read_into(columns, [True] * len(batch), []))

    def _chunk(self, start: int, pending: set[str]) -> tuple[Columns, list[bool]]:
        """The entries from ``start`` as the index holds them, and which of them changed
        since the last write (taken out of ``pending``)."""
        index = self._index
        with index.lock:
            ids = self._ids[start : start + CHUNK_ENTRIES]
            dirty = self._dirty
            changed = list(map(or_, map(pending.__contains__, ids), map(dirty.__contains__, ids)))
            statuses = list(map(index.statuses.get, ids))
            metadata = list(map(index.metadata.get, ids))
        pending.difference_update(compress(ids, changed))
        stamps = self._stamps[start : start + CHUNK_ENTRIES].tolist()
        return Columns(ids, stamps, statuses, metadata), changed

    def _read_into(self, columns: Columns, changed: list[bool], gone: list[int]) -> Columns:
        """``columns`` with the ``changed`` entries read now, without those ``gone``
        (nor those whose folder went)."""
        stamper = self._store.stamper(self._key, time.time_ns() - RACY_NS)
        root = str(self._store.root)
        keep = bytearray(b"\x01") * len(columns.ids)
        for at in gone:
            keep[at] = 0
        for at in compress(range(len(columns.ids)), changed):
            task_id = columns.ids[at]
            path = os.path.join(root, task_id[: task_id.find("#")], task_id)
            inode = _folder_inode(path)
            if inode is None:
                keep[at] = 0
                continue
            records, columns.stamps[at] = stamper.capture(path, task_id, inode)
            columns.statuses[at], columns.metadata[at] = records.status, records.metadata
        if keep.count(0):
            ids, stamps, statuses, metadata = columns
            columns = Columns(
                list(compress(ids, keep)),
                list(compress(stamps, keep)),
                list(compress(statuses, keep)),
                list(compress(metadata, keep)),
            )
        return columns


class _Written:
    """The entries a write put out, in order (ids and stamps), and their arrangement."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.stamps = array("q")
        self.arranger = Arranger()

    def take(self, columns: Columns) -> Iterator[Columns]:
        if columns.ids:
            self.ids += columns.ids
            self.stamps.extend(columns.stamps)
            self.arranger.add(columns.ids, columns.statuses)
            yield columns


def _worth_writing(count: int) -> int:
    """Changes worth a write of the snapshot of ``count`` tasks."""
    return min(CHANGES_MIN, max(count // CHANGES_SHARE, 1))


def _reuse(
    batch: list[TaskFolder], now: list[int], cached: _Cached, keep: bytearray
) -> list[TaskFolder]:
    """Mark the entries of ``batch`` whose stamp kept is ``now``'s (and not racy); the
    folders to be read (compared in C: a loop here took a third of the check's time)."""
    nowhere = len(cached.stamps) - 1  # the position of a folder not in the snapshot
    places = list(map(cached.positions.get, map(itemgetter(0), batch), repeat(nowhere)))
    kept = map(cached.stamps.__getitem__, places)
    same = list(map(and_, map(eq, now, kept), map(RACY.__ne__, now)))
    for at in compress(places, same):
        keep[at] = 1
    return list(compress(batch, map(not_, same)))



def _folder_inode(path: str) -> int | None:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return info.st_ino if stat.S_ISDIR(info.st_mode) else None
