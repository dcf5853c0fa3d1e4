"""The server's periodic garbage collection, when ``retention`` is configured.

    collector = PeriodicCollector(context, interval=3600.0)
    collector.start()      # a daemon thread: one collection every ``interval`` seconds
    collector.stop()       # wakes it, waits for a collection in progress to finish

A failed collection is logged and tried again at the next interval; it never stops the
thread or the server.
"""

from __future__ import annotations

import logging
import threading

from runyard.retention.collect import GcContext, collect

log = logging.getLogger("runyard.retention")


class PeriodicCollector:
    def __init__(self, context: GcContext, interval: float) -> None:
        self.context = context
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="runyard-gc", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                collect(self.context)
            except Exception:
                log.exception("periodic gc failed; trying again in %.0f s", self.interval)
