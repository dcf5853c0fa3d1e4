"""The live runs: processes launched by this server or adopted after a restart, and pods.

A launched run is polled through its executor handle. An adopted local one (left running
by a previous server) is watched through a pidfd, checked against its recorded start time
so a reused PID is never mistaken for it; its exit code comes from the ``exit-code`` file
the launcher writes; it is cancelled by signalling its process group, and what it leaves
behind is killed through its cgroup (named from the run id). A pod's handle is
plain JSON, so it is rebuilt after a restart and polled and cancelled as before.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runyard.executors.base import Executor, Handle
from runyard.executors.containment import agent_cgroup_name, sweep
from runyard.executors.local import open_pidfd, process_start_time, terminate_group

CANCELLED = "cancelled"
TIMED_OUT = "timeout"
UNKNOWN_EXIT = -1000


@dataclass
class LiveRun:
    run_id: str
    session_id: str
    pid: int | None
    start_time: int | None
    exit_file: Path
    deadline: float
    handle: Handle | None = None
    pidfd: int | None = None
    stop_reason: str = ""

    def handle_record(self) -> dict[str, object]:
        """What the store keeps to find this run again after a restart."""
        if self.pid is None and self.handle is not None:  # a pod: its handle is JSON
            handle = self.handle
            return {"id": handle.id, "labels": handle.labels, "data": handle.data}
        return {"pid": self.pid, "startTime": self.start_time}


def handle_from_record(record: dict[str, Any]) -> Handle | None:
    """The executor handle a record of :meth:`LiveRun.handle_record` describes, if any."""
    if not isinstance(record.get("data"), dict) or not isinstance(record.get("id"), str):
        return None
    return Handle(id=record["id"], labels=dict(record.get("labels") or {}), data=record["data"])


def read_exit_file(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


class RunProcesses:
    """Tracks live runs and wakes a waiter when one ends (pidfds plus an eventfd)."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self._runs: dict[str, LiveRun] = {}
        self._lock = threading.Lock()
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def launched(self, live: LiveRun) -> LiveRun:
        if live.pid is not None:
            live.start_time = live.start_time or process_start_time(live.pid)
            live.pidfd = open_pidfd(live.pid)
        self._add(live)
        return live

    def adopt(self, live: LiveRun) -> bool:
        """Watch a run a previous server started; False when its process is gone."""
        if live.pid is not None:
            live.pidfd = open_pidfd(live.pid, live.start_time)
            if live.pidfd is None:
                sweep(agent_cgroup_name(live.run_id))  # what its ended process left running
                return False
        elif live.handle is None:
            return False
        self._add(live)
        return True

    def _add(self, live: LiveRun) -> None:
        with self._lock:
            self._runs[live.run_id] = live
        self.wake()

    def get(self, run_id: str) -> LiveRun | None:
        with self._lock:
            return self._runs.get(run_id)

    def all(self) -> list[LiveRun]:
        with self._lock:
            return list(self._runs.values())

    def wake(self) -> None:
        os.eventfd_write(self._wake, 1)

    def wait(self, timeout: float) -> None:
        """Sleep until a run's process exits, :meth:`wake` is called, or ``timeout``."""
        poller = select.poll()
        poller.register(self._wake, select.POLLIN)
        for live in self.all():
            if live.pidfd is not None:
                poller.register(live.pidfd, select.POLLIN)
        poller.poll(max(0, int(timeout * 1000)))
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._wake)

    def exit_code(self, live: LiveRun) -> int | None:
        """None while it runs, else its exit code (:data:`UNKNOWN_EXIT` for an adopted run
        that ended without recording one)."""
        if live.handle is not None:
            info = self.executor.poll(live.handle)
            return None if info is None else info.exit_code
        if live.pidfd is not None and not select.select([live.pidfd], [], [], 0)[0]:
            return None
        code = read_exit_file(live.exit_file)
        return UNKNOWN_EXIT if code is None else code

    def stop(self, live: LiveRun, reason: str, grace: float) -> None:
        """SIGTERM the run's process group, SIGKILL after ``grace`` seconds, then kill
        everything left in its cgroup."""
        live.stop_reason = live.stop_reason or reason
        if live.handle is not None:
            self.executor.cancel(live.handle, grace)
        elif live.pid is not None:
            terminate_group(live.pid, grace, live.start_time)
            sweep(agent_cgroup_name(live.run_id))
        self.wake()

    def forget(self, live: LiveRun) -> None:
        with self._lock:
            self._runs.pop(live.run_id, None)
        if live.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(live.pidfd)
            live.pidfd = None
        if live.handle is not None:
            with contextlib.suppress(Exception):
                self.executor.cleanup(live.handle)
        elif live.pid is not None:  # adopted: what the run left running ends with it
            sweep(agent_cgroup_name(live.run_id))

    def close(self) -> None:
        close_executor = getattr(self.executor, "close", None)
        if callable(close_executor):
            close_executor()
        for live in self.all():
            if live.pidfd is not None:
                with contextlib.suppress(OSError):
                    os.close(live.pidfd)
        with contextlib.suppress(OSError):
            os.close(self._wake)


def deadline_after(seconds: float) -> float:
    return time.monotonic() + seconds
