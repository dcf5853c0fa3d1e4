"""Wake asyncio waiters when a task's records change (repository watcher thread -> loop)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from runyard.repository import TaskRepository


class Subscription:
    def __init__(self) -> None:
        self.event = asyncio.Event()

    async def wait(self, timeout: float | None) -> bool:
        """Wait for a change (True) or the timeout (False); then re-arm."""
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            self.event.clear()
        return True


class ChangeHub:
    def __init__(self, repository: TaskRepository) -> None:
        self.repository = repository
        self._subs: defaultdict[str, set[Subscription]] = defaultdict(set)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unsubscribe: Callable[[], None] | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._unsubscribe = self.repository.subscribe(self._on_change)

    def detach(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    @contextmanager
    def subscribe(self, task_id: str) -> Iterator[Subscription]:
        """Register before reading state, so no change between read and wait is lost."""
        sub = Subscription()
        self._subs[task_id].add(sub)
        try:
            yield sub
        finally:
            subs = self._subs.get(task_id)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subs[task_id]

    def _on_change(self, task_id: str, file_name: str) -> None:
        loop = self._loop
        if loop is not None and task_id in self._subs:
            loop.call_soon_threadsafe(self._wake, task_id)

    def _wake(self, task_id: str) -> None:
        for sub in self._subs.get(task_id, ()):
            sub.event.set()
