"""The thread that fires schedules on time: it sleeps until the earliest next tick (woken
sooner when a schedule changes), then asks for what is due.

>>> ticker = Ticker(scheduler.run_due, scheduler.seconds_to_next)
>>> ticker.start()
>>> ticker.stop()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("runyard.schedules")

# a tick is looked for at most this long after its minute, whatever the clock does
MAX_SLEEP = 30.0
# past the tick's instant, so the walk back from "now" finds it
SETTLE = 0.05


class Ticker:
    def __init__(self, run_due: Callable[[], Any], seconds_to_next: Callable[[], float]) -> None:
        self._run_due = run_due
        self._seconds_to_next = seconds_to_next
        self._stopping = threading.Event()
        self._woken = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="runyard-schedules", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Look again now (a schedule was made, deleted, paused or resumed)."""
        self._woken.set()

    def stop(self) -> None:
        self._stopping.set()
        self._woken.set()
        if self._thread is not None:
            self._thread.join(30)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self._run_due()
                delay = min(MAX_SLEEP, self._seconds_to_next() + SETTLE)
            except Exception:  # a full disk, a task gone wrong: keep ticking, say so
                log.exception("schedules: a tick failed; trying again in a second")
                delay = 1.0
            self._woken.wait(delay)
            self._woken.clear()
