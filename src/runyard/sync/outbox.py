"""Continuous sync: push each task when it finishes, through an outbox that survives restarts.

``sync: {target: NAME, task_types: [...]}`` in the settings turns it on. When the
supervisor sees a task end, :meth:`SyncOutbox.enqueue` writes an empty file named by the
task id under ``<workspace>/.sync/outbox/`` (atomically, before anything is sent), and a
daemon thread pushes every file it finds there — at start too, so work queued before a
crash or stop is pushed after it. A file is removed once the receiver has answered for
its task (sent, same, or refused: a refusal is logged and not retried). While the
target cannot be reached, the thread waits with exponential backoff and tries again::

    outbox = SyncOutbox(workspace, Receiver(url, token), task_types=["train"])
    outbox.start()
    outbox.enqueue("train#fit#a")   # from the supervisor's hook
    outbox.stop()
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path

from runyard.sync.errors import SyncError
from runyard.sync.sender import Receiver, push_one
from runyard.workspace.atomic import write_bytes_atomic
from runyard.workspace.identity import parse_task_id
from runyard.workspace.layout import Workspace

log = logging.getLogger("runyard.sync")
FIRST_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 30.0


def outbox_dir(workspace: Workspace) -> Path:
    return workspace.root / ".sync" / "outbox"


def outbox_depth(workspace: Workspace) -> int:
    """Tasks waiting in the outbox to be pushed (0 without continuous sync)."""
    try:
        with os.scandir(outbox_dir(workspace)) as entries:
            return sum(1 for entry in entries if not entry.name.startswith("."))
    except FileNotFoundError:
        return 0


class SyncOutbox:
    """Pushes finished tasks to one receiver; see the module docstring."""

    def __init__(
        self, workspace: Workspace, receiver: Receiver, task_types: Iterable[str] = ()
    ) -> None:
        self.workspace = workspace
        self.receiver = receiver
        self.task_types = frozenset(task_types)
        self.folder = outbox_dir(workspace)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="runyard-sync", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def enqueue(self, task_id: str) -> bool:
        """Queue ``task_id`` if it is finished and of a synced type; True if queued."""
        status = self.workspace.read_status(task_id)
        if status is None or not status.terminal:
            return False
        if self.task_types and status.task_type not in self.task_types:
            return False
        self.folder.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(self.folder / task_id, b"", fsync=True)
        self._wake.set()
        return True

    def pending(self) -> list[str]:
        try:
            names = sorted(os.listdir(self.folder))
        except FileNotFoundError:
            return []
        return [n for n in names if not n.startswith(".")]

    def _loop(self) -> None:
        backoff = FIRST_BACKOFF_SECONDS
        while not self._stop.is_set():
            self._wake.clear()
            if self._drain():
                backoff = FIRST_BACKOFF_SECONDS
                self._wake.wait()
            else:  # the target is down: wait, doubling, unless stopped
                self._stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    def _drain(self) -> bool:
        """Push every pending task; False when the receiver could not be reached."""
        for task_id in self.pending():
            if self._stop.is_set():
                return True
            try:
                self._push(task_id)
            except SyncError as exc:
                log.warning("sync of %s to %s failed, will retry: %s", task_id,
                            self.receiver.url, exc)  # fmt: skip
                return False
            (self.folder / task_id).unlink(missing_ok=True)
        return True

    def _push(self, task_id: str) -> None:
        try:
            parse_task_id(task_id)
        except ValueError:
            return  # not ours: dropped
        report = push_one(self.workspace, self.receiver, task_id)
        for refused, reason in report.reasons.items():
            log.warning("sync of %s refused by %s: %s", refused, self.receiver.url, reason)
