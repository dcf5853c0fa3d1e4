"""The supervisor's queue of task runs: first in, first out, but never behind a capped owner.

    queue = FairQueue()
    queue.append("t1", "r1", owner=None)          # an admin task
    queue.append("t2", "r2", owner="session-a")   # a task submitted by a run of session-a
    queue.pop_next(capped={"session-a"})          # ("t1", "r1"): session-a is at its cap
    queue.take("t2")                              # removed (a cancel), or None

Tasks submitted by agent runs are owned by their session, which may hold only
``agent_task_slots`` of the task slots at once. A single FIFO would either launch past that
cap or stop at the first capped entry, and then one run's backlog would hold up admin tasks
and every other session. So each owner has a FIFO of its own (admin tasks share one), every
entry keeps its arrival number, and :meth:`FairQueue.pop_next` takes the oldest head among
the owners not capped: the order of arrival wherever the caps allow it, at a cost that grows
with the number of owners with queued work, never with the length of a backlog.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass

__all__ = ["FairQueue"]


@dataclass(frozen=True)
class _Entry:
    order: int
    task_id: str
    run_id: str


class FairQueue:
    """Queued task runs by owner (``None``: admin); not thread-safe (the supervisor's lock)."""

    def __init__(self) -> None:
        self._by_owner: dict[str | None, deque[_Entry]] = {}
        self._arrivals = itertools.count()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def append(self, task_id: str, run_id: str, owner: str | None) -> None:
        entry = _Entry(next(self._arrivals), task_id, run_id)
        self._by_owner.setdefault(owner, deque()).append(entry)
        self._size += 1

    def pop_next(self, capped: Collection[str | None] = ()) -> tuple[str, str] | None:
        """The oldest ``(task_id, run_id)`` whose owner is not in ``capped``, removed; None
        when every queued entry belongs to a capped owner (or nothing is queued)."""
        heads = [(q[0].order, owner) for owner, q in self._by_owner.items() if owner not in capped]
        if not heads:
            return None
        owner = min(heads, key=lambda head: head[0])[1]
        entry = self._pop(owner)
        return entry.task_id, entry.run_id

    def take(self, task_id: str) -> tuple[str, str] | None:
        """Remove the queued run of ``task_id``: its ``(task_id, run_id)``, or None."""
        for owner, entries in self._by_owner.items():
            found = next((e for e in entries if e.task_id == task_id), None)
            if found is not None:
                entries.remove(found)
                self._size -= 1
                if not entries:
                    del self._by_owner[owner]
                return found.task_id, found.run_id
        return None

    def entries(self) -> list[tuple[str, str]]:
        """Every queued ``(task_id, run_id)``, oldest first; the queue stays as it is."""
        every = sorted((e for entries in self._by_owner.values() for e in entries),
                       key=lambda entry: entry.order)  # fmt: skip
        return [(entry.task_id, entry.run_id) for entry in every]

    def clear(self) -> None:
        self._by_owner.clear()
        self._size = 0

    def _pop(self, owner: str | None) -> _Entry:
        entries = self._by_owner[owner]
        entry = entries.popleft()
        self._size -= 1
        if not entries:
            del self._by_owner[owner]
        return entry
