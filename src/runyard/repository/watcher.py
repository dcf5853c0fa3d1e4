"""Filesystem events under the task type folders, turned into per-task changes.

Two ways to watch, chosen when the repository starts:

``recursive``
    The type folders and every task folder in them: one inotify watch per folder (and per
    subfolder of a task folder, off Linux). Every change of a record is seen, including a
    finished task's folder rewritten in place by another process. But the cost grows with
    history: 100,000 task folders take ~100,000 watches of the per-user budget
    (``fs.inotify.max_user_watches``; 192,536 on the reference machine) and 1-2 s to place
    at start, and off Linux every open of any record (a backup reading the workspace, say)
    becomes an event the watcher thread has to handle.
``sparse``
    The type folders plus the folders of tasks that are not finished (or have no valid
    record yet): watches grow with the active tasks, not with history. The watch set is
    rebuilt when it changes (new watcher first, then the old one is drained, then the newly
    watched folders are re-read, so nothing is lost in between). New, removed and replaced
    task folders show in the type folders' events. The price: a finished task's records
    rewritten in place by another process are seen at the next ``get`` / ``refresh`` of
    that task, not at once. runyard's own writers never do that: a finished task is only
    ever replaced (its folder renamed aside, a new one made) or deleted.

``auto`` takes ``recursive`` up to ``RECURSIVE_MAX_FOLDERS`` task folders, while they fit
in 80 % of the budget (the rest is left to other watchers of the same user), and
``sparse`` beyond, or when the kernel refuses the recursive watches. Events are grouped
for at most ``DEBOUNCE_MS`` and handed over ``STEP_MS`` after the last one, so a change
reaches subscribers within a few ms.

Watching goes through a generator of batches, one per watch set, in the watcher thread: on
Linux :func:`runyard.repository.inotify.inotify_feed`, which asks the kernel only for the
events a record change makes (a file closed after writing, moved, removed; a task folder
made, moved or removed), and watches type and task folders, nothing below; elsewhere
watchfiles' public generator (:func:`watchfiles.watch`), which also reports every open and
every write of a watched file and watches every folder below. Each returns to the thread every
``WAIT_MS`` without changes, so a sparse watcher notices a resync request, and an old watch
set can be drained quickly when it is replaced.

The kernel drops events when its queue (``fs.inotify.max_queued_events``) overflows: the
inotify feed then reports the task folders that may have changed meanwhile, to be read
again (at most once every ten seconds). Watches are placed after the start-up scan rather
than before it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterable
from collections.abc import Set as AbstractSet
from pathlib import Path

from runyard.workspace.identity import TASK_TYPES, is_task_id
from runyard.workspace.layout import RECORD_FILES

log = logging.getLogger(__name__)

RECURSIVE = "recursive"
SPARSE = "sparse"
AUTO = "auto"
WATCH_MODES = frozenset({AUTO, RECURSIVE, SPARSE})
FOLDER = ""
DEBOUNCE_MS = 15
STEP_MS = 3
WAIT_MS = 10
REBUILD_SPACING = 9
BUDGET_FILE = Path("/proc/sys/fs/inotify/max_user_watches")
BUDGET_SHARE = 0.8
BUDGET_RESERVE = 1024
RECURSIVE_MAX_FOLDERS = 20_000

Changes = dict[str, set[str]]
Feed = Generator[AbstractSet[tuple[int, str]], None, None]  # batches of (change, path)

# watchfiles logs every batch at INFO; the index's changes are not news for a log.
if logging.getLogger("watchfiles.main").level == logging.NOTSET:
    logging.getLogger("watchfiles.main").setLevel(logging.WARNING)


def watch_budget() -> int:
    try:
        return int(BUDGET_FILE.read_text())
    except (OSError, ValueError):
        return 8192


def choose_mode(requested: str, task_folders: int) -> str:
    if requested != AUTO:
        return requested
    fits = task_folders + BUDGET_RESERVE <= watch_budget() * BUDGET_SHARE
    return RECURSIVE if fits and task_folders <= RECURSIVE_MAX_FOLDERS else SPARSE


class TaskWatcher:
    """A thread that reports ``{task_id: {file names}}`` changes (``FOLDER`` for the folder)."""

    def __init__(
        self,
        root: Path,
        on_changes: Callable[[Changes], None],
        active_ids: Callable[[], set[str]],
    ) -> None:
        self._root = os.path.abspath(root)
        self._prefix = self._root + os.sep
        self._on_changes = on_changes
        self._active_ids = active_ids
        self._stop = threading.Event()
        self._resync = threading.Event()
        self._feed: Feed | None = None
        self._pending: Changes = {}
        self._paths: frozenset[str] = frozenset()
        self._thread: threading.Thread | None = None
        self._next_rebuild = 0.0
        self.mode = ""

    def open(self, requested: str, task_folders: int) -> str:
        """Place the watches (after the caller's scan: reading 100,000 watched folders would
        flood the watcher with open events); the caller then re-reads what changed since."""
        type_dirs = self._type_dirs()
        mode = choose_mode(requested, task_folders)
        if mode == RECURSIVE:
            try:
                self._feed = self._build(type_dirs, recursive=True)
                self._paths = frozenset(type_dirs)
            except OSError as exc:
                log.warning("recursive watch refused (%s); watching active tasks only", exc)
                mode = SPARSE
        self.mode = mode
        if mode == SPARSE:
            self._paths = frozenset(type_dirs) | self._active_dirs().keys()
            self._feed = self._build(sorted(self._paths), recursive=False)
        return mode

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="runyard-repository", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._feed is not None:
            self._feed.close()
            self._feed = None

    def request_resync(self) -> None:
        """Tell a sparse watcher that the set of active tasks changed."""
        if self.mode == SPARSE:
            self._resync.set()

    def _run(self) -> None:
        pending, self._pending = self._pending, {}
        self._dispatch(pending)  # what came while the first watch set was being placed
        while not self._stop.is_set() and self._feed is not None:
            if self._resync.is_set() and time.monotonic() >= self._next_rebuild:
                self._resync.clear()
                self._rebuild()
            batch = next(self._feed, None)
            if batch is None:  # the stop event ended the watch
                return
            self._dispatch(self.translate(batch))

    def _dispatch(self, changes: Changes) -> None:
        if not changes:
            return
        try:
            self._on_changes(changes)
        except Exception:
            log.exception("handling workspace changes failed")

    def _active_dirs(self) -> dict[str, str]:
        return {self._task_dir(task_id): task_id for task_id in self._active_ids()}

    def _rebuild(self) -> None:
        """Watch the active set now; rebuilds are spaced so they take at most ~10 % of the
        thread (a long queue of active tasks makes each rebuild cost more)."""
        began = time.monotonic()
        try:
            self._replace_watches()
        finally:
            ended = time.monotonic()
            self._next_rebuild = ended + REBUILD_SPACING * (ended - began)

    def _replace_watches(self) -> None:
        wanted = self._active_dirs()
        paths = frozenset(self._type_dirs()) | wanted.keys()
        if paths == self._paths or self._feed is None:
            return
        try:
            fresh = self._build(sorted(paths), recursive=False)
        except OSError as exc:
            log.warning("could not rebuild the watch set (%s)", exc)
            return
        stale, self._feed = self._feed, fresh
        changes, self._pending = self._pending, {}  # seen by the fresh set while it was placed
        self._merge(changes, self.translate(next(stale, set())))  # the old set's last events
        stale.close()
        for path, task_id in wanted.items():
            if path not in self._paths:
                changes.setdefault(task_id, set()).add(FOLDER)
        self._paths = paths
        self._dispatch(changes)

    def _build(self, paths: list[str], *, recursive: bool) -> Feed:
        """A started watch of ``paths``; folders removed meanwhile are left out. The first
        batch (the watches are placed when the generator first runs) goes to ``_pending``."""
        for _ in range(3):
            try:
                return self._started(paths, recursive=recursive)
            except FileNotFoundError:
                paths = [path for path in paths if os.path.isdir(path)]
        return self._started(paths, recursive=recursive)

    def _started(self, paths: list[str], *, recursive: bool) -> Feed:
        feed = self._feed_of(paths, recursive)
        first = next(feed, set())
        self._merge(self._pending, self.translate(first))
        return feed

    def _feed_of(self, paths: list[str], recursive: bool) -> Feed:
        """Linux: :func:`~runyard.repository.inotify.inotify_feed` (only the events a
        record change makes); elsewhere watchfiles' generator, which sees every open too."""
        if sys.platform == "linux":
            from runyard.repository.inotify import inotify_feed

            return inotify_feed(
                [path for path in paths if os.path.dirname(path) == self._root],
                [path for path in paths if os.path.dirname(path) != self._root],
                recursive=recursive, stop=self._stop,
                debounce_ms=DEBOUNCE_MS, step_ms=STEP_MS, wait_ms=WAIT_MS, names=RECORD_FILES,
            )  # fmt: skip
        import watchfiles

        return watchfiles.watch(
            *paths,
            watch_filter=None,
            debounce=DEBOUNCE_MS,
            step=STEP_MS,
            stop_event=self._stop,
            rust_timeout=WAIT_MS,
            yield_on_timeout=True,
            raise_interrupt=False,
            force_polling=False,
            recursive=recursive,
            ignore_permission_denied=True,
        )

    @staticmethod
    def _merge(into: Changes, more: Changes) -> None:
        for task_id, names in more.items():
            into.setdefault(task_id, set()).update(names)

    def _type_dirs(self) -> list[str]:
        dirs = [os.path.join(self._root, task_type) for task_type in sorted(TASK_TYPES)]
        return [path for path in dirs if os.path.isdir(path)]

    def _task_dir(self, task_id: str) -> str:
        return os.path.join(self._root, task_id.split("#", 1)[0], task_id)

    def translate(self, raw: Iterable[tuple[int, str]]) -> Changes:
        """Group raw ``(change, path)`` events by task; other paths are dropped."""
        changes: Changes = {}
        for _, path in raw:
            found = self._task_change(path)
            if found is not None:
                changes.setdefault(found[0], set()).add(found[1])
        return changes

    def _task_change(self, path: str) -> tuple[str, str] | None:
        if not path.startswith(self._prefix):
            return None
        parts = path[len(self._prefix) :].split(os.sep)
        if len(parts) < 2 or len(parts) > 3 or parts[0] not in TASK_TYPES:
            return None
        task_id = parts[1]
        if not task_id.startswith(parts[0] + "#") or not is_task_id(task_id):
            return None
        if len(parts) == 2:
            return task_id, FOLDER
        return (task_id, parts[2]) if parts[2] in RECORD_FILES else None
