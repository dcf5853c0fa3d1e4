"""Wake asyncio waiters (event streams) when a run's records change, from any thread."""

from __future__ import annotations

import asyncio
import threading


class ChangeSignal:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    def notify(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop is closed
                self._discard(loop, event)

    def _discard(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
        with self._lock:
            self._waiters.discard((loop, event))

    async def wait(self, timeout: float) -> bool:
        """Wait for the next :meth:`notify` (True) or ``timeout`` seconds (False)."""
        key = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.add(key)
        try:
            await asyncio.wait_for(key[1].wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self._discard(*key)
