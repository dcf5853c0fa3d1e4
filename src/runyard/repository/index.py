"""The in-memory index: compact records, ordered buckets, lineage children, active set.

Statuses are kept in one list of task ids per ``(task_type, state)`` bucket, ascending
by ``(instant, task_id)`` (the key is read from the status when compared: eight bytes a
task rather than a tuple), so a page is a lazy descending merge of the buckets a filter
selects: its cost depends on the page size, not on the number of tasks. One more list
holds every id with a status in that order, so a whole listing is a copy, not a sort.
Every method takes the index lock; callers that read files and apply them hold
the same (reentrant) lock around both, so applications happen in the order the files
were read.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import threading
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Final

from runyard.errors import InvalidInput
from runyard.repository.arrangement import Kept, merged, take
from runyard.repository.records import (
    CREATED_AT,
    INSTANT,
    META_PARENTS,
    PARENTS,
    STATE,
    FolderRecords,
    MetadataRecord,
    StatusRecord,
    shared,
)
from runyard.workspace.identity import is_task_id
from runyard.workspace.records import TERMINAL_STATES

SortKey = tuple[int, str]
MERGE_LIMIT = 1000


class _Keep:
    """Marker: leave this part of an entry as it is."""


KEEP: Final = _Keep()


def encode_cursor(key: SortKey) -> str:
    return base64.urlsafe_b64encode(f"{key[0]}|{key[1]}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> SortKey:
    """The position a cursor names, or :class:`InvalidInput`."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        instant, task_id = base64.urlsafe_b64decode(padded).decode().split("|")
        key = (int(instant), task_id)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidInput(
            f"Invalid cursor {cursor!r}: pass the next_cursor of a previous page"
        ) from exc
    if not is_task_id(task_id):
        raise InvalidInput(f"Invalid cursor {cursor!r}: pass the next_cursor of a previous page")
    return key


class TaskIndex:
    """Thread-safe index of every task folder's valid status and metadata."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.statuses: dict[str, StatusRecord] = {}
        self.metadata: dict[str, MetadataRecord] = {}
        # sorted tuples, not sets: most parents have one or two children (48 bytes, not 216)
        self.children: dict[str, tuple[str, ...]] = {}
        self._buckets: dict[tuple[str, str], list[str]] = {}
        self._order: list[str] = []  # every id of ``statuses``, ascending like a bucket
        self._active: set[str] = set()

    def __len__(self) -> int:
        with self.lock:
            return len(self.statuses.keys() | self.metadata.keys())

    def apply(
        self,
        task_id: str,
        *,
        status: StatusRecord | None | _Keep = KEEP,
        metadata: MetadataRecord | None | _Keep = KEEP,
        exists: bool | None = None,
    ) -> bool:
        """Replace parts of one entry; True when the set of active tasks changed.

        ``exists`` is whether the folder is there (None: not known by this read).
        """
        with self.lock:
            before = self.parents_of(task_id)
            was_active = task_id in self._active
            if not isinstance(status, _Keep) and status != self.statuses.get(task_id):
                self._set_status(task_id, status)
            if not isinstance(metadata, _Keep):
                self._set_metadata(task_id, metadata)
            self._relink(task_id, before, self.parents_of(task_id))
            self._update_active(task_id, exists)
            return was_active != (task_id in self._active)

    def load(self, folders: Iterable[tuple[str, FolderRecords]]) -> None:
        """Fill an empty index in one go (sorting each bucket once beats inserting one by one;
        the rules are those of :meth:`apply`, spelled out inline for 100,000 folders)."""
        with self.lock:
            self._fill(folders)
        release_free_memory()

    def load_kept(self, kept: Kept, read: Iterable[tuple[str, FolderRecords]]) -> None:
        """Fill an empty index with the entries kept from a snapshot, as it arranged them
        (:mod:`runyard.repository.arrangement`), and the folders ``read`` again;
        ValueError (the index left empty) when the snapshot does not fit its entries."""
        with self.lock:
            parts = take(kept)
            self.statuses, self.metadata, self._order, self._buckets = parts[:4]
            self._active, self.children = parts[4:]
            self.add_folders(read)
        release_free_memory()

    def add_folders(self, folders: Iterable[tuple[str, FolderRecords]]) -> None:
        """:meth:`apply_folder` of each, for folders the index holds nothing of: each list
        they enter is merged with them in one pass (not one insertion each)."""
        with self.lock:
            ordered: list[str] = []
            for task_id, found in folders:
                if self._has(task_id):
                    self.apply_folder(task_id, found)
                    continue
                exists, status, meta = found
                if status is not None:
                    self.statuses[task_id] = status
                    ordered.append(task_id)
                if meta is not None:
                    self.metadata[task_id] = meta if status is None else shared(meta, status)
                self._relink(task_id, (), self.parents_of(task_id))
                self._update_active(task_id, exists)
            self._order = merged(self._order, ordered, self._key)
            added: dict[tuple[str, str], list[str]] = {}
            for task_id in ordered:
                added.setdefault(_bucket(task_id, self.statuses[task_id]), []).append(task_id)
            for key, ids in added.items():
                self._buckets[key] = merged(self._buckets.get(key, []), ids, self._key)

    def _has(self, task_id: str) -> bool:
        return task_id in self.statuses or task_id in self.metadata or task_id in self._active

    def _fill(self, folders: Iterable[tuple[str, FolderRecords]]) -> None:
        children: dict[str, list[str]] = {}
        for task_id, (exists, status, meta) in folders:
            parents: tuple[str, ...] = ()
            if status is not None:
                self.statuses[task_id] = status
                key = (task_id[: task_id.find("#")], status[STATE])
                self._buckets.setdefault(key, []).append(task_id)
                parents = status[PARENTS]
                if status[STATE] not in TERMINAL_STATES:
                    self._active.add(task_id)
            if meta is not None:
                self.metadata[task_id] = meta if status is None else shared(meta, status)
                parents = meta[META_PARENTS]
            elif status is None and exists:
                self._active.add(task_id)
            for parent in parents:
                children.setdefault(parent, []).append(task_id)
        instants = {task_id: status[INSTANT] for task_id, status in self.statuses.items()}
        for bucket in self._buckets.values():
            self._sort(bucket, instants.__getitem__)
        self._order = self._sort(list(self.statuses), instants.__getitem__)
        self.children = {parent: tuple(sorted(tasks)) for parent, tasks in children.items()}

    def _sort(self, ids: list[str], instant_of: Callable[[str], int] | None = None) -> list[str]:
        """``ids`` sorted in place by ``(instant, task_id)``: by id, then stably by instant
        (three times faster than one sort on a key tuple); ``instant_of``, when given, is a
        task's instant taken from a table (a lookup instead of a Python call for each)."""
        statuses = self.statuses
        ids.sort()
        ids.sort(key=instant_of or (lambda task_id: statuses[task_id][INSTANT]))
        return ids

    def apply_folder(self, task_id: str, found: FolderRecords) -> bool:
        return self.apply(
            task_id, status=found.status, metadata=found.metadata, exists=found.exists
        )

    def parents_of(self, task_id: str) -> tuple[str, ...]:
        meta = self.metadata.get(task_id)
        if meta is not None:
            return meta[META_PARENTS]
        status = self.statuses.get(task_id)
        return status[PARENTS] if status is not None else ()

    def active_ids(self) -> set[str]:
        """Tasks not finished yet, and folders that have no valid record yet."""
        with self.lock:
            return set(self._active)

    def counts(self) -> dict[tuple[str, str], int]:
        """How many statuses each ``(task_type, state)`` bucket holds (cost: the buckets)."""
        with self.lock:
            return {key: len(ids) for key, ids in self._buckets.items() if ids}

    def page(
        self,
        buckets: Iterable[tuple[str, str]],
        after: SortKey | None,
        limit: int | None,
        match: Callable[[str, StatusRecord], bool] | None = None,
    ) -> tuple[list[tuple[str, StatusRecord]], SortKey | None]:
        """Up to ``limit`` statuses below ``after``, newest first; the last key if more follow.

        With ``match``, only statuses it accepts count, examined lazily in order.
        """
        with self.lock:
            if match is not None:
                ids = self._matching(buckets, after, limit, match)
            else:
                ids = self._below(buckets, after, None if limit is None else limit + 1)
            more = limit is not None and len(ids) > limit
            ids = ids[:limit] if more else ids
            found = list(zip(ids, map(self.statuses.__getitem__, ids), strict=True))
            return found, (self._key(ids[-1]) if more else None)

    def ids(self, buckets: Iterable[tuple[str, str]]) -> list[str]:
        """Every task id of the buckets, newest first (no per-task objects are made)."""
        with self.lock:
            return self._below(buckets, None, None)

    def _matching(
        self,
        buckets: Iterable[tuple[str, str]],
        after: SortKey | None,
        limit: int | None,
        match: Callable[[str, StatusRecord], bool],
    ) -> list[str]:
        runs = []
        for name in buckets:
            ids = self._buckets.get(name)
            if ids:
                stop = len(ids) if after is None else bisect_left(ids, after, key=self._key)
                runs.append(_descending(ids, stop))
        merged = heapq.merge(*runs, key=self._key, reverse=True)
        wanted = (task_id for task_id in merged if match(task_id, self.statuses[task_id]))
        return list(wanted if limit is None else islice(wanted, limit + 1))

    def _below(
        self, buckets: Iterable[tuple[str, str]], after: SortKey | None, count: int | None
    ) -> list[str]:
        """``count`` ids below ``after`` (all if None), descending: a lazy merge of the
        buckets for a page; for a long listing, a slice of the whole order when the buckets
        hold every status, else one sort of the buckets' ids."""
        runs: list[tuple[list[str], int]] = []
        for name in set(buckets):
            ids = self._buckets.get(name)
            if ids:
                stop = len(ids) if after is None else bisect_left(ids, after, key=self._key)
                runs.append((ids, stop))
        if count is not None and count <= MERGE_LIMIT:
            descending = (_descending(ids, stop) for ids, stop in runs)
            return list(islice(heapq.merge(*descending, key=self._key, reverse=True), count))
        if sum(len(ids) for ids, _ in runs) == len(self._order):
            stop = sum(stop for _, stop in runs)  # as many ids below ``after`` in the order
            start = 0 if count is None else max(0, stop - count)
            return self._order[start:stop][::-1]
        found = self._sort([task_id for ids, stop in runs for task_id in ids[:stop]])
        found.reverse()
        return found if count is None else found[:count]

    def _key(self, task_id: str) -> SortKey:
        return self.statuses[task_id][INSTANT], task_id

    def _set_status(self, task_id: str, record: StatusRecord | None) -> None:
        old = self.statuses.get(task_id)
        moved = old is None or record is None or old[INSTANT] != record[INSTANT]
        if old is not None:  # removed while ``old`` is still the indexed record (the keys)
            self._remove(self._buckets[_bucket(task_id, old)], task_id, old)
            if moved:
                self._remove(self._order, task_id, old)
        meta = self.metadata.get(task_id)
        if old is not None and meta is old:  # it stood for the metadata too: keep its values
            values = (old[INSTANT], old[CREATED_AT], old[PARENTS])
            self.metadata[task_id] = values if record is None else shared(values, record)
        if record is None:
            self.statuses.pop(task_id, None)
            return
        self.statuses[task_id] = record
        insort(self._buckets.setdefault(_bucket(task_id, record), []), task_id, key=self._key)
        if moved:
            insort(self._order, task_id, key=self._key)

    def _remove(self, ids: list[str], task_id: str, record: StatusRecord) -> None:
        at = bisect_left(ids, (record[INSTANT], task_id), key=self._key)
        if at < len(ids) and ids[at] == task_id:
            del ids[at]

    def _set_metadata(self, task_id: str, record: MetadataRecord | None) -> None:
        if record is None:
            self.metadata.pop(task_id, None)
            return
        status = self.statuses.get(task_id)
        self.metadata[task_id] = shared(record, status) if status is not None else record

    def _relink(self, task_id: str, before: tuple[str, ...], after: tuple[str, ...]) -> None:
        if before == after:
            return
        for parent in before:
            siblings = self.children.get(parent, ())
            if task_id in siblings:
                remaining = tuple(child for child in siblings if child != task_id)
                if remaining:
                    self.children[parent] = remaining
                else:
                    del self.children[parent]
        for parent in after:
            siblings = self.children.get(parent, ())
            if task_id not in siblings:
                self.children[parent] = tuple(sorted((*siblings, task_id)))

    def _update_active(self, task_id: str, exists: bool | None) -> None:
        status = self.statuses.get(task_id)
        if status is not None:
            active = status[STATE] not in TERMINAL_STATES
        elif task_id in self.metadata:
            active = False
        elif exists is None:
            active = task_id in self._active
        else:
            active = exists
        if active:
            self._active.add(task_id)
        else:
            self._active.discard(task_id)


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). Building the index frees about as much as it keeps (the scan's models, the
    scan helper's answer), in pieces the process would otherwise keep: a tenth of its
    memory once ready, at 100,000 tasks."""
    import ctypes  # here: a server that never builds an index need not load it

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


def _bucket(task_id: str, record: StatusRecord) -> tuple[str, str]:
    return task_id.split("#", 1)[0], record[STATE]


def _descending(ids: list[str], stop: int) -> Iterator[str]:
    return (ids[at] for at in range(stop - 1, -1, -1))
