"""Watches of task folders on Linux, asking the kernel only for the events a record change makes.

watchfiles (through the ``notify`` crate) places every inotify watch with ``IN_OPEN`` and
``IN_MODIFY`` in its mask: each read of a record (the server's own reads included), each
write of each line a worker appends and each step of an atomic replace became an event,
queued by the kernel in the caller's system call and read by the watcher thread: about
sixty a task, for the three or four that change a record. Here a type folder is watched for
folders made, moved in or out and removed, and a task folder for files closed after writing,
moved in or out and removed: an atomic replace shows as its rename, an appended line as its
close. Nothing below a task folder is watched (its records are its own files).

:func:`inotify_feed` is a generator of batches as :func:`watchfiles.watch` yields them,
``{(change, path)}`` (``change`` as :class:`watchfiles.Change`: 1 added, 2 modified, 3
deleted): from the first event, what each further ``step_ms`` brings is taken at once, and
the batch is handed over after a step that added nothing to it, or after ``debounce_ms``;
an empty batch comes every ``wait_ms`` without any event. With ``recursive`` it also watches
each task folder of the given type folders, from the start and as they arrive; a folder
that arrives is watched before its batch is handed over, so the read of it that the batch
causes sees every write made before its watch. When the kernel's queue overflows (events
were dropped), a batch names the task folders that may have changed meanwhile (see
:meth:`_Watches.rescan_if_due`), and each is read again.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Generator, Iterable

from inotify_simple import INotify, flags

log = logging.getLogger(__name__)

ADDED, MODIFIED, DELETED = 1, 2, 3
FOLLOW = flags.ONLYDIR | flags.DONT_FOLLOW
GONE = flags.DELETE_SELF | flags.MOVE_SELF
TYPE_MASK = FOLLOW | GONE | flags.CREATE | flags.MOVED_TO | flags.MOVED_FROM | flags.DELETE
TASK_MASK = FOLLOW | GONE | flags.CLOSE_WRITE | flags.MOVED_TO | flags.MOVED_FROM | flags.DELETE
CHANGE = {
    flags.CREATE: ADDED,
    flags.MOVED_TO: ADDED,
    flags.CLOSE_WRITE: MODIFIED,
    flags.MOVED_FROM: DELETED,
    flags.DELETE: DELETED,
}
RESCAN_SPACING = 10.0  # seconds
RESCAN_SLACK_NS = 2_000_000_000  # a folder's time and this clock may differ a little
SKIPPED = (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.ELOOP)

Batch = set[tuple[int, str]]


def inotify_feed(
    type_dirs: Iterable[str],
    task_dirs: Iterable[str],
    *,
    recursive: bool,
    stop: threading.Event,
    debounce_ms: int,
    step_ms: int,
    wait_ms: int,
    names: frozenset[str] | None = None,
) -> Generator[Batch, None, None]:
    """Batches of changes in ``type_dirs`` (and in their task folders, with ``recursive``)
    and in ``task_dirs``; of a task folder's files only ``names``, when given (a temporary
    file or a lock then neither starts a batch nor holds one open). The first ``next``
    places the watches and returns an empty batch; it raises ``FileNotFoundError`` for a
    folder given that is gone, ``OSError`` when the kernel refuses a watch (the per-user
    budget). Ends when ``stop`` is set."""
    watches = _Watches(INotify(), recursive, names)
    try:
        for path in type_dirs:
            watches.add_type(path)
        for path in task_dirs:
            watches.add(path, TASK_MASK)
        yield set()
        while not stop.is_set():
            batch: Batch = set()
            watches.take(watches.read(wait_ms), batch)
            watches.rescan_if_due(batch)
            began = time.monotonic()
            while batch and (time.monotonic() - began) * 1000 < debounce_ms:
                # what comes in the next step, taken at once: a wait woken by each event
                # would take the interpreter lock from the server's other threads as often
                time.sleep(step_ms / 1000)
                size = len(batch)
                watches.take(watches.read(0), batch)
                if len(batch) == size:
                    break  # a step with nothing new: hand it over
            yield batch
    finally:
        watches.inotify.close()


class _Watches:
    """One inotify instance and what each of its watch descriptors watches."""

    def __init__(
        self, inotify: INotify, recursive: bool, names: frozenset[str] | None = None
    ) -> None:
        self.inotify = inotify
        self.recursive = recursive
        self.names = names
        self.paths: dict[int, str] = {}  # watch descriptor: folder
        self.types: set[int] = set()  # the descriptors of type folders
        self.by_path: dict[str, int] = {}
        self.read_ns = self.previous_ns = time.time_ns()  # when the last two reads began
        self.lost_since: int | None = None  # the kernel dropped events from then on
        self.next_rescan = 0.0  # monotonic time from which a rescan may run again

    def read(self, timeout: int) -> list[object]:
        began = time.time_ns()
        found: list[object] = self.inotify.read(timeout=timeout)
        self.previous_ns, self.read_ns = self.read_ns, began
        return found

    def add_type(self, path: str) -> None:
        """Watch the type folder ``path``, and its task folders when recursive."""
        self.types.add(self.add(path, TYPE_MASK))
        if self.recursive:
            for name in _subfolders(path):
                self._add_child(os.path.join(path, name), budget_errors=True)

    def take(self, events: Iterable[object], batch: Batch) -> None:
        for event in events:
            wd, mask, name = event.wd, event.mask, event.name  # type: ignore[attr-defined]
            if mask & flags.Q_OVERFLOW:  # what came since the read before this one is lost
                if self.lost_since is None:
                    self.lost_since = self.previous_ns
                continue
            folder = self.paths.get(wd)
            if mask & flags.IGNORED:
                self._forget(wd)
                continue
            if folder is None or not name:
                continue  # the folder itself went (its parent reports it) or an old watch
            if self.names is not None and name not in self.names and wd not in self.types:
                continue
            path = os.path.join(folder, name)
            change = next((c for f, c in CHANGE.items() if mask & f), MODIFIED)
            if wd in self.types and mask & flags.ISDIR:
                if mask & (flags.MOVED_FROM | flags.DELETE):
                    self._drop(path)
                elif self.recursive:
                    self._add_child(path, budget_errors=False)
            batch.add((change, path))

    def rescan_if_due(self, batch: Batch) -> None:
        """After an overflow, put in ``batch`` the task folders whose events may be lost:
        those changed since (a record replaced, a folder made or renamed in: the folder's
        time moves), those not watched yet, and the watched ones that are gone. At most one
        such listing every ``RESCAN_SPACING`` seconds: overflowing the queue on purpose
        (writes in a loop) costs a few listings a minute, not one each time."""
        if self.lost_since is None or time.monotonic() < self.next_rescan:
            return
        since, self.lost_since = self.lost_since - RESCAN_SLACK_NS, None
        self.next_rescan = time.monotonic() + RESCAN_SPACING
        log.warning("inotify queue overflowed: reading the task folders changed since again")
        for wd in list(self.types):
            folder = self.paths.get(wd)
            if folder is None:
                continue
            listed = {os.path.join(folder, name) for name in _subfolders(folder)}
            for path in listed:
                unwatched = self.recursive and path not in self.by_path
                if unwatched:
                    self._add_child(path, budget_errors=False)
                if unwatched or _mtime_ns(path) >= since:
                    batch.add((MODIFIED, path))
            prefix = folder + os.sep
            for path in [p for p in self.by_path if p.startswith(prefix) and p not in listed]:
                self._drop(path)
                batch.add((DELETED, path))

    def _add_child(self, path: str, *, budget_errors: bool) -> None:
        """Watch the task folder ``path``; one that is gone or no folder is skipped. Out
        of watches, start-up fails (``budget_errors``, so the caller can watch less) and
        later a folder goes unwatched, with a warning."""
        try:
            self.add(path, TASK_MASK)
        except OSError as exc:
            if exc.errno in SKIPPED:
                return
            if budget_errors:
                raise
            log.warning("cannot watch %s (%s); its changes show at its next read", path, exc)

    def add(self, path: str, mask: int) -> int:
        wd = self.inotify.add_watch(path, mask)
        self.paths[wd] = path
        self.by_path[path] = wd
        return wd

    def _drop(self, path: str) -> None:
        wd = self.by_path.pop(path, None)
        if wd is None:
            return
        self.paths.pop(wd, None)
        with contextlib.suppress(OSError):  # removed with its folder already
            self.inotify.rm_watch(wd)

    def _forget(self, wd: int) -> None:
        path = self.paths.pop(wd, None)
        self.types.discard(wd)
        if path is not None and self.by_path.get(path) == wd:
            del self.by_path[path]


def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path, follow_symlinks=False).st_mtime_ns
    except OSError:
        return 0


def _subfolders(path: str) -> list[str]:
    try:
        with os.scandir(path) as entries:
            return [e.name for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
