"""The one place that watches processes: pidfds, checked against PID reuse, and the exit thread.

    start = process_start_time(pid)           # recorded with the pid
    with watching(pid, start) as proc:        # None: gone, or the pid now names another process
        ended = proc is None or proc.wait(5.0)
    is_alive(pid, start); wait_exit(pid, 5.0, start)
    monitor = ExitMonitor(on_exit); monitor.start(); monitor.watch(key, pid, start)

Any process can be watched, not only our children: ``pidfd_open`` works for any PID, and the
pidfd becomes readable when the process exits. A pid is taken for the process it was recorded
for only when its start time (``/proc/<pid>/stat``) matches: a recycled pid is "gone". Every
other module waits for exits through here and never polls a pidfd itself.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import select
import selectors
import threading
import time
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)


def process_start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22)."""
    try:  # one read, no file object: every worker and launch asks
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        raw = os.read(fd, 4096)  # a few hundred bytes
    except OSError:
        return None
    finally:
        os.close(fd)
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def open_pidfd(pid: int, start_time: int | None = None) -> int | None:
    """A pidfd on ``pid``, or None when it is gone or (given ``start_time``) a different process."""
    try:
        fd = os.pidfd_open(pid)
    except (ProcessLookupError, PermissionError, OSError):
        return None
    if start_time is not None and process_start_time(pid) != start_time:
        os.close(fd)
        return None
    return fd


class Watched:
    """A process held by its pidfd: its pid cannot be taken for another one meanwhile."""

    def __init__(self, pidfd: int) -> None:
        self.pidfd = pidfd

    def wait(self, timeout: float | None) -> bool:
        """True when the process has exited (now, or within ``timeout`` seconds)."""
        poller = select.poll()
        poller.register(self.pidfd, select.POLLIN)
        ms = None if timeout is None else max(0, int(timeout * 1000))
        return bool(poller.poll(ms))


@contextlib.contextmanager
def watching(pid: int, start_time: int | None = None) -> Iterator[Watched | None]:
    """The process ``pid`` (checked against ``start_time``) while the block runs; None when
    it is gone or the pid now names another process."""
    pidfd = open_pidfd(pid, start_time)
    if pidfd is None:
        yield None
        return
    try:
        yield Watched(pidfd)
    finally:
        os.close(pidfd)


def wait_exit(pid: int, timeout: float | None, start_time: int | None = None) -> bool:
    """True when the process has ended (or is not there) within ``timeout`` seconds."""
    with watching(pid, start_time) as proc:
        return proc is None or proc.wait(timeout)


def is_alive(pid: int, start_time: int | None = None) -> bool:
    """The process ``pid`` runs (a zombie counts as ended) and is the one recorded."""
    return not wait_exit(pid, 0, start_time)


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
        """Interrupt the select; call with the lock held (the fds live until stop()). The
        monitor's own thread (a launch from an exit's callback, say) need not: it registers
        and times anew before it selects again, and a write and a read a launch are saved."""
        if threading.get_ident() == self._thread.ident:
            return
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
