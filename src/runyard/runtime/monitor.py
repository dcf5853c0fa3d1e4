"""A thread that notices process exits at once (pidfd + selectors) and runs timers.

Any process can be watched, not only our children: ``pidfd_open`` works for any PID, and
the pidfd becomes readable when the process exits. Callbacks run in the monitor thread.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import selectors
import threading
import time
from collections.abc import Callable

from runyard.executors.local import open_pidfd

log = logging.getLogger(__name__)

ExitCallback = Callable[[str, int | None], None]


class ExitMonitor:
    """Call ``on_exit(key, pidfd)`` when a watched process ends (``pidfd`` None: it was
    already gone when watched). The pidfd is closed after the callback returns."""

    def __init__(self, on_exit: ExitCallback) -> None:
        self._on_exit = on_exit
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._pending: list[tuple[str, int]] = []
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._watched: dict[str, int] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="runyard-monitor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close every fd; watches and timers are dropped."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            self._wake()
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join(10)
        self._close()

    def watch(self, key: str, pid: int, start_time: int | None = None) -> None:
        """Watch ``pid`` (checked against ``start_time`` when given) under ``key``."""
        pidfd = open_pidfd(pid, start_time)
        if pidfd is None:
            self.call_later(0.0, lambda: self._on_exit(key, None))
            return
        with self._lock:
            if self._stopping:
                os.close(pidfd)
                return
            self._pending.append((key, pidfd))
            self._wake()

    def call_later(self, delay: float, callback: Callable[[], None]) -> None:
        with self._lock:
            if not self._stopping:
                when = time.monotonic() + delay
                heapq.heappush(self._timers, (when, next(self._seq), callback))
                self._wake()

    def _wake(self) -> None:
        """Interrupt the select; call with the lock held (the fds live until stop())."""
        with contextlib.suppress(BlockingIOError):  # a wake-up is already pending
            os.write(self._wake_w, b"x")

    def _run(self) -> None:
        while self._loop_once():
            pass

    def _loop_once(self) -> bool:
        with self._lock:
            if self._stopping:
                return False
            self._register_pending()
            timeout = self._timers[0][0] - time.monotonic() if self._timers else None
        for key, _ in self._selector.select(None if timeout is None else max(0.0, timeout)):
            if key.data is None:
                self._drain_wake()
            else:
                self._exited(key.data, key.fd)
        for callback in self._due_timers():
            self._guard(callback)
        return True

    def _register_pending(self) -> None:
        for key, pidfd in self._pending:
            old = self._watched.pop(key, None)
            if old is not None:
                self._selector.unregister(old)
                os.close(old)
            self._watched[key] = pidfd
            self._selector.register(pidfd, selectors.EVENT_READ, key)
        self._pending.clear()

    def _exited(self, key: str, pidfd: int) -> None:
        self._selector.unregister(pidfd)
        if self._watched.get(key) == pidfd:
            del self._watched[key]
        try:
            self._guard(lambda: self._on_exit(key, pidfd))
        finally:
            os.close(pidfd)

    def _due_timers(self) -> list[Callable[[], None]]:
        now = time.monotonic()
        due = []
        with self._lock:
            while self._timers and self._timers[0][0] <= now:
                due.append(heapq.heappop(self._timers)[2])
        return due

    def _drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass

    @staticmethod
    def _guard(callback: Callable[[], None]) -> None:
        try:
            callback()
        except Exception:
            log.exception("runyard monitor callback failed")

    def _close(self) -> None:
        with self._lock:
            pidfds = [pidfd for _, pidfd in self._pending] + list(self._watched.values())
            self._pending.clear()
        for pidfd in pidfds:
            os.close(pidfd)
        self._watched.clear()
        self._selector.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
