"""One change hub: wake asyncio waiters (event streams) when a record changes, from any thread.

Producers call :meth:`ChangeHub.changed` with the id of what changed (a task id, a run id)
from whatever thread they run on: the repository's watcher thread for task records (see
:meth:`ChangeHub.follow`), the run service for agent runs. A change that touches several
records at once (a session's queue moving on, a restart) is :meth:`ChangeHub.changed_all`.
Consumers subscribe *before* reading state, so no change between the read and the wait is
lost::

    with hub.subscribe(task_id) as sub:
        ...                       # read state, send it
        await sub.wait(timeout)   # True: something changed; False: timed out

A subscription wakes the loop it was made on. This module imports nothing of runyard's, so
every layer can hold the hub it is handed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

Unsubscribe = Callable[[], None]


class ChangeSource(Protocol):
    """What :meth:`ChangeHub.follow` listens to (the task repository is one)."""

    def subscribe(self, callback: Callable[[str, str], None]) -> Unsubscribe: ...


class Subscription:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.event = asyncio.Event()

    def wake(self) -> None:
        """Set the event from any thread (a no-op once the loop is closed)."""
        # a closed loop raises RuntimeError: nobody is waiting there any more
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.event.set)

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
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subs: dict[str, set[Subscription]] = {}
        self._unfollow: list[Unsubscribe] = []

    def follow(self, source: ChangeSource) -> None:
        """Turn each change ``source`` reports (``callback(id, name)``) into :meth:`changed`."""
        self._unfollow.append(source.subscribe(lambda key, _name: self.changed(key)))

    def unfollow(self) -> None:
        """Stop listening to every followed source. Idempotent."""
        while self._unfollow:
            self._unfollow.pop()()

    def changed(self, key: str) -> None:
        """Wake the subscribers of ``key``. Safe from any thread."""
        with self._lock:
            subs = list(self._subs.get(key, ()))
        for sub in subs:
            sub.wake()

    def changed_all(self) -> None:
        """Wake every subscriber (a change that touched several records at once)."""
        with self._lock:
            subs = [sub for group in self._subs.values() for sub in group]
        for sub in subs:
            sub.wake()

    @contextmanager
    def subscribe(self, key: str) -> Iterator[Subscription]:
        """Register before reading state, so no change between read and wait is lost.

        Must be entered on the event loop that will wait.
        """
        sub = Subscription(asyncio.get_running_loop())
        with self._lock:
            self._subs.setdefault(key, set()).add(sub)
        try:
            yield sub
        finally:
            with self._lock:
                group = self._subs.get(key)
                if group is not None:
                    group.discard(sub)
                    if not group:
                        del self._subs[key]
