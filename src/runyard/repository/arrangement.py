"""Where the index keeps a snapshot's entries, saved with them so a start takes it as is.

Building the index sorts every status by ``(instant, task_id)`` and sorts each
``(task_type, state)`` bucket: at a million tasks, seconds of a start spent finding again
an order the last server had. The snapshot writer (:mod:`runyard.repository.keeper`)
feeds each entry it writes to an :class:`Arranger`, which then says where the entries with
a status sit (:class:`Arrangement`): their positions in list order, and each bucket's
positions in the same order. A start keeps the entries whose folders did not change, and
:func:`take` builds the index from them by filtering the arrangement: the records are not
read again, but for lineage (the children of each parent) and a sample whose shape is
checked. The folders read again are then added to it
(:meth:`runyard.repository.index.TaskIndex.add_folders`).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from itertools import compress, islice
from operator import eq, gt, itemgetter, not_
from typing import NamedTuple, TypeVar, cast

from runyard.repository.records import (
    INSTANT,
    META_PARENTS,
    STATE,
    MetadataRecord,
    StatusRecord,
)
from runyard.workspace.records import TERMINAL_STATES

Bucket = tuple[str, str]
Record = TypeVar("Record", StatusRecord, MetadataRecord)
POSITION = "I"  # array type of positions: 32 bits (a snapshot of 4 billion entries is not)
SAMPLE = 1000  # records whose shape a start checks, of each kind
OUT_OF_ORDER = 100  # entries out of list order (one in so many) that a write puts back in it


class Arrangement(NamedTuple):
    """Positions (among a snapshot's entries) of those with a status, in list order, and
    of each bucket's in the same order."""

    order: array[int]
    buckets: dict[Bucket, array[int]]


class Kept(NamedTuple):
    """A snapshot's entries (columns of equal length), ``keep[at]`` 1 for those to take
    (their folder unchanged), and their arrangement."""

    ids: list[str]
    statuses: list[StatusRecord | None]
    metadata: list[MetadataRecord | None]
    keep: bytearray
    arrangement: Arrangement


class Parts(NamedTuple):
    """What a :class:`runyard.repository.index.TaskIndex` holds, built from kept entries."""

    statuses: dict[str, StatusRecord]
    metadata: dict[str, MetadataRecord]
    order: list[str]
    buckets: dict[Bucket, list[str]]
    active: set[str]
    children: dict[str, tuple[str, ...]]


class Arranger:
    """Takes the entries a snapshot write puts out, in order; then their arrangement."""

    def __init__(self) -> None:
        self.count = 0  # entries so far
        self._positions = array(POSITION)  # of those with a status
        self._ids: list[str] = []
        self._statuses: list[StatusRecord] = []
        self._order: array[int] | None = None

    def add(self, ids: list[str], statuses: list[StatusRecord | None]) -> None:
        """The next entries written (a chunk's columns)."""
        self._positions.extend(compress(range(self.count, self.count + len(ids)), statuses))
        self._ids += compress(ids, statuses)
        self._statuses += cast(Iterable[StatusRecord], compress(statuses, statuses))
        self.count += len(ids)

    def arrangement(self) -> Arrangement:
        """Once every entry was added."""
        ranks = ascending(list(map(itemgetter(INSTANT), self._statuses)), self._ids)
        order = self._order = array(POSITION, map(self._positions.__getitem__, ranks))
        ids = map(self._ids.__getitem__, ranks)
        states = map(itemgetter(STATE), map(self._statuses.__getitem__, ranks))
        buckets: dict[Bucket, array[int]] = {}
        for position, task_id, state in zip(order, ids, states, strict=True):
            key = (task_id[: task_id.find("#")], state)
            found = buckets.get(key)
            if found is None:
                found = buckets[key] = array(POSITION)
            found.append(position)
        return Arrangement(order, buckets)

    def in_order(self) -> list[int]:
        """Every position, those with a status first in list order (the order to write
        them in next time, where an arrangement is found without sorting); after
        :meth:`arrangement`."""
        assert self._order is not None
        ranked = bytearray(self.count)
        for position in self._order:
            ranked[position] = 1
        return [*self._order, *compress(range(self.count), map(not_, ranked))]


def ascending(instants: list[int], ids: list[str]) -> list[int]:
    """The ranks of ``(instants[r], ids[r])`` in ascending order: one stable sort by
    instant (linear when they come nearly in order), then ties by id."""
    ranks = sorted(range(len(instants)), key=instants.__getitem__)
    ordered = list(map(instants.__getitem__, ranks))
    tied = compress(range(len(ordered)), map(eq, ordered, islice(ordered, 1, None)))
    start = end = -2  # the run of ties being gathered: ranks[start : end + 2]
    for at in tied:
        if at != end + 1:
            _ties_by_id(ranks, start, end + 2, ids)
            start = at
        end = at
    _ties_by_id(ranks, start, end + 2, ids)
    return ranks


def mostly_ascending(positions: array[int]) -> bool:
    """Whether no more than one position in :data:`OUT_OF_ORDER` comes before the one
    above it: entries written in list order, but for a few read again."""
    descents = sum(map(gt, positions, islice(positions, 1, None)))
    return descents * OUT_OF_ORDER <= len(positions)


def _ties_by_id(ranks: list[int], start: int, stop: int, ids: list[str]) -> None:
    if start >= 0:
        ranks[start:stop] = sorted(ranks[start:stop], key=ids.__getitem__)


def take(kept: Kept) -> Parts:
    """The index of the kept entries; ValueError when the arrangement or a sampled record
    does not fit them (the caller then reads every folder)."""
    ids, statuses, metadata, keep, arrangement = kept
    if not len(ids) == len(statuses) == len(metadata) == len(keep):
        raise ValueError("the snapshot's columns differ in length")
    kept_ids = list(compress(ids, keep))
    kept_statuses = list(compress(statuses, keep))
    kept_metadata = list(compress(metadata, keep))
    _check_shapes(kept_statuses, kept_metadata)
    by_id = _present(kept_ids, kept_statuses)
    order = _taken(ids, keep, arrangement.order)
    buckets = {key: _taken(ids, keep, positions) for key, positions in arrangement.buckets.items()}
    buckets = {key: found for key, found in buckets.items() if found}
    if len(order) != len(by_id) or sum(map(len, buckets.values())) != len(order):
        raise ValueError("the snapshot's arrangement does not hold its statuses")
    active: set[str] = set()
    for (_, state), found in buckets.items():
        if state not in TERMINAL_STATES:
            active.update(found)
    active.update(_recordless(kept_ids, kept_statuses, kept_metadata))
    return Parts(
        by_id,
        _present(kept_ids, kept_metadata),
        order,
        buckets,
        active,
        _children(kept_ids, kept_statuses, kept_metadata),
    )


def _present(ids: list[str], records: list[Record | None]) -> dict[str, Record]:
    """``{task_id: record}`` of the records that are there (filtered in C, not one by one)."""
    return cast(dict[str, Record], dict(compress(zip(ids, records, strict=True), records)))


def _taken(ids: list[str], keep: bytearray, positions: array[int]) -> list[str]:
    return list(compress(map(ids.__getitem__, positions), map(keep.__getitem__, positions)))


def _recordless(
    ids: list[str], statuses: list[StatusRecord | None], metadata: list[MetadataRecord | None]
) -> Iterator[str]:
    for at in compress(range(len(ids)), map(not_, statuses)):
        if metadata[at] is None:
            yield ids[at]


def _children(
    ids: list[str], statuses: list[StatusRecord | None], metadata: list[MetadataRecord | None]
) -> dict[str, tuple[str, ...]]:
    children: dict[str, list[str]] = {}
    for task_id, status, meta in zip(ids, statuses, metadata, strict=True):
        record = meta if meta is not None else status
        if record is not None and record[META_PARENTS]:
            for parent in record[META_PARENTS]:
                found = children.get(parent)
                if found is None:
                    children[parent] = [task_id]
                else:
                    found.append(task_id)
    return {parent: tuple(sorted(tasks)) for parent, tasks in children.items()}


def _check_shapes(
    statuses: list[StatusRecord | None], metadata: list[MetadataRecord | None]
) -> None:
    """Records of another shape (a records format changed without its number) fail here,
    as they would have failed while an index was filled from them one by one."""
    for status in [status for status in statuses[:SAMPLE] if status is not None]:
        instant, created_at, parents, packed, state = status
        if not (
            type(instant) is int
            and (created_at is None or type(created_at) is str)
            and type(parents) is tuple
            and type(packed) is bytes
            and type(state) is str
        ):
            raise ValueError("the snapshot's statuses are not of the index's shape")
    for meta in [meta for meta in metadata[:SAMPLE] if meta is not None]:
        if type(meta) is not tuple or len(meta) not in (3, 5) or type(meta[INSTANT]) is not int:
            raise ValueError("the snapshot's metadata are not of the index's shape")


def merged(ids: list[str], new: list[str], key: Callable[[str], tuple[int, str]]) -> list[str]:
    """``ids`` (ascending by ``key``) with ``new`` (few) in their places: a bisection for
    each and one copy of the rest, in slices."""
    if not new:
        return ids
    new.sort(key=key)
    out: list[str] = []
    start = 0
    for task_id in new:
        at = bisect_left(ids, key(task_id), start, key=key)
        out += ids[start:at]
        out.append(task_id)
        start = at
    out += ids[start:]
    return out
