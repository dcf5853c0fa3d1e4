"""TaskRepository: every task's status and metadata, indexed once and kept live."""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from runyard.errors import InvalidInput, TaskNotFound
from runyard.repository.graph import build_graph, build_relations, collect_component
from runyard.repository.index import TaskIndex, decode_cursor, encode_cursor
from runyard.repository.keeper import SnapshotKeeper
from runyard.repository.models import TaskContext, TaskGraph
from runyard.repository.records import (
    META_INSTANT,
    DamagedRecord,
    FolderRecords,
    StatusRecord,
    TaskFolder,
    list_task_folders,
    metadata_values,
    parse_metadata,
    parse_status,
    read_folder,
    read_one,
    recent_status_json,
    status_model,
    status_record,
    text_matcher,
)
from runyard.repository.scan import scan_all
from runyard.repository.snapshot import SnapshotStore
from runyard.repository.watcher import (
    AUTO,
    FOLDER,
    RECURSIVE,
    WATCH_MODES,
    Changes,
    TaskWatcher,
)
from runyard.workspace.identity import TASK_TYPES, parse_task_id
from runyard.workspace.layout import (
    EVENTS_FILE,
    METADATA_FILE,
    RECORD_FILES,
    STATUS_FILE,
    Workspace,
)
from runyard.workspace.records import TERMINAL_STATES, TaskMetadata, TaskState, TaskStatus

log = logging.getLogger(__name__)

ChangeCallback = Callable[[str, str], None]
Matcher = Callable[[str, StatusRecord], bool]
# Folder mtimes move in coarse ticks (whole seconds on some filesystems); anything modified
# this close to the start of the scan is read again.
CATCH_UP_SLACK_NS = 1_000_000_000
# From this many task folders on, what the first scan leaves is frozen out of the cyclic
# GC's sight (see _gc_paused).
FREEZE_MIN_FOLDERS = 100_000


class TaskRepository:
    """The index of every task's ``status.json`` and ``metadata.json``.

    One scan at :meth:`start` builds it; filesystem events keep it live (see
    :mod:`runyard.repository.watcher`). ``get`` / ``get_metadata`` read the file itself and
    update the index; lists, graph and context answer from the index. Writers call
    :meth:`refresh` after their own writes so their next read agrees at once::

        repo = TaskRepository(Workspace.open(Path(".runyard"), Path("logs")))
        repo.start()
        page, cursor = repo.list_statuses(limit=50, state="running")
        more, cursor = repo.list_statuses(limit=50, state="running", cursor=cursor)
        repo.stop()

    ``subscribe(callback)`` calls ``callback(task_id, file_name)`` from the watcher thread
    after the index has taken in a change of ``status.json``, ``metadata.json`` or
    ``events.jsonl`` (``file_name == ""``: the task folder was removed).

    With ``snapshots`` (the server's), a watching start loads the index snapshot and reads
    again only the folders that changed since, and the snapshot is kept up to date
    (:mod:`runyard.repository.keeper`).
    """

    def __init__(
        self, workspace: Workspace, *, watch_mode: str = AUTO, snapshots: bool = False
    ) -> None:
        if watch_mode not in WATCH_MODES:
            raise InvalidInput(f"watch_mode must be one of {', '.join(sorted(WATCH_MODES))}")
        self.workspace = workspace
        self._watch_mode = watch_mode
        self._index = TaskIndex()
        self._watcher: TaskWatcher | None = None
        self._subscribers: list[ChangeCallback] = []
        self._subscribers_lock = threading.Lock()
        self._started = False
        self._overlay: Callable[[str], TaskStatus | None] | None = None
        # set once the first scan is in the index: until then reads go to the files only
        self.ready = threading.Event()
        self.progress = (0, 0)  # folders (indexed, found) of the first scan
        self._indexing = False  # the scan is filling the index: nothing else may change it
        self._snapshots = snapshots
        self._keeper: SnapshotKeeper | None = None
        self.freeze_min_folders = FREEZE_MIN_FOLDERS

    def set_overlay(self, overlay: Callable[[str], TaskStatus | None] | None) -> None:
        """Serve ``overlay(task_id)``, when not None, instead of the status file: the truth a
        full disk keeps from its file (it says so in its ``error``)."""
        self._overlay = overlay

    def _held(self, task_id: str) -> bytes | None:
        held = self._overlay(task_id) if self._overlay is not None else None
        return held.model_dump_json().encode() if held is not None else None

    @property
    def watch_mode(self) -> str:
        """``recursive`` or ``sparse`` while watching, ``""`` otherwise."""
        return self._watcher.mode if self._watcher is not None else ""

    def __len__(self) -> int:
        return len(self._index)

    def __enter__(self) -> TaskRepository:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self, watch: bool = True) -> None:
        """Scan the workspace once; with ``watch``, keep the index live from then on."""
        if self._started:
            return
        self._index = TaskIndex()
        self.ready.clear()
        if watch:
            self._make_type_dirs()
        since = time.time_ns()
        folders = list_task_folders(self.workspace.root)
        self.progress = (0, len(folders))
        if watch and self._snapshots:
            store = SnapshotStore(self.workspace.root)
            self._keeper = SnapshotKeeper(store, self._index, since)
        self._load(folders)
        if watch:
            self._watcher = TaskWatcher(self.workspace.root, self._on_changes, self._active_ids)
            mode = self._watcher.open(self._watch_mode, len(folders))
            self._catch_up(folders, since, everything=mode == RECURSIVE)
            self._watcher.start()
        self._started = True
        self.ready.set()
        if self._keeper is not None:
            self._keeper.begin()

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        if self._keeper is not None:  # after the watcher: the index changes no more
            self._keeper.stop()
            self._keeper = None
        self._started = False
        self.ready.clear()

    def refresh(self, task_id: str) -> None:
        """Re-read one task's records into the index now."""
        self._refresh(task_id, self.workspace.task_dir(task_id))

    def take_changes(self, task_id: str, names: set[str]) -> None:
        """Changes to a task's record files (``status.json``, ``events.jsonl``) seen other
        than by the watcher — a worker on another node raises no inotify event here: the
        index re-reads them and subscribers (streams, waits) hear of them as from it."""
        for changed_id, name in self._take_change(task_id, names):
            self._notify(changed_id, name)

    def get(self, task_id: str) -> TaskStatus | None:
        """The task's status read from its file now (None if missing or invalid)."""
        task_dir = self.workspace.task_dir(task_id)
        with self._index.lock:
            exists, raw = read_one(task_dir, STATUS_FILE)
            raw = self._held(task_id) or raw
            kept = self._index.statuses.get(task_id)
            if raw is not None and kept is not None and raw == recent_status_json(kept):
                # the bytes the index was made from (runyard writes a status as it answers
                # it): the record is the same, only the model is wanted
                return TaskStatus.model_validate_json(raw)
            parsed = parse_status(raw, task_id)
            record = parsed[0] if parsed else None
            if self._indexing:
                pass  # the scan under way will take it in (or its catch-up, if it changed)
            elif record != self._index.statuses.get(task_id):
                self._active_changed(self._index.apply(task_id, status=record, exists=exists))
                self._records_changed(task_id)
        return parsed[1] if parsed else None

    def get_unless_busy(self, task_id: str) -> tuple[bool, TaskStatus | None]:
        """``(True, get(task_id))`` when the file holds what the index does (the usual case:
        no lock is needed then) or no other thread holds the index now, else ``(False,
        None)`` at once: a caller on the event loop then waits for it elsewhere."""
        unchanged = self._get_unchanged(task_id)
        if unchanged is not None:
            return True, unchanged
        if not self._index.lock.acquire(blocking=False):
            return False, None
        try:
            return True, self.get(task_id)
        finally:
            self._index.lock.release()

    def _get_unchanged(self, task_id: str) -> TaskStatus | None:
        """:meth:`get` without the lock, when the status file's bytes are the ones the index
        holds (so it would change nothing), else None. The watcher applies a change under
        the lock while reading folders, so a caller that waits for the lock would mostly
        wait for a read of other tasks' files; with the lock free or not, the answer is the
        file as it was when read."""
        kept = self._index.statuses.get(task_id)  # records are tuples, replaced whole
        if kept is None:
            return None
        _, raw = read_one(self.workspace.task_dir(task_id), STATUS_FILE)
        raw = self._held(task_id) or raw
        if raw is None or raw != recent_status_json(kept):
            return None
        return TaskStatus.model_validate_json(raw)

    def get_metadata(self, task_id: str) -> TaskMetadata | None:
        """The task's metadata read from its file now (None if missing or invalid)."""
        task_dir = self.workspace.task_dir(task_id)
        with self._index.lock:
            exists, raw = read_one(task_dir, METADATA_FILE)
            parsed = parse_metadata(raw, task_id)
            record = parsed[0] if parsed else None
            if self._indexing:
                pass  # as in get
            elif record != metadata_values(self._index.metadata.get(task_id)):
                self._active_changed(self._index.apply(task_id, metadata=record, exists=exists))
                self._records_changed(task_id)
        return parsed[1] if parsed else None

    def peek(self, task_id: str) -> TaskStatus | None:
        """The status as the index holds it, without reading the file."""
        record = self._index.statuses.get(task_id)
        return self._model(task_id, record) if record is not None else None

    def list_statuses(
        self,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        state: str | None = None,
        task_type: str | None = None,
        text: str | None = None,
        visible: Matcher | None = None,
    ) -> tuple[list[TaskStatus], str | None]:
        """Statuses by created_at desc, then task_id desc; ``(page, next_cursor or None)``.

        ``text`` keeps tasks whose id, name, state, error or config values contain it
        (case-insensitive); ``visible(task_id, record)`` keeps only what it accepts. Both
        cost a scan of the candidates, not just a page.
        """
        if limit is not None and (isinstance(limit, bool) or limit < 1):
            raise InvalidInput(f"limit must be a positive integer, got {limit!r}")
        after = decode_cursor(cursor) if cursor else None
        match = _both(text_matcher(text) if text else None, visible)
        found, last = self._index.page(_buckets(state, task_type), after, limit, match)
        page = [self._model(task_id, record) for task_id, record in found]
        return [s for s in page if s], (encode_cursor(last) if last is not None else None)

    def _model(self, task_id: str, record: StatusRecord) -> TaskStatus | None:
        try:
            return status_model(record)
        except DamagedRecord:  # the file is read instead (and indexed again)
            return self.get(task_id)

    def list_entries(
        self, *, state: str | None = None, task_type: str | None = None
    ) -> list[tuple[str, StatusRecord]]:
        """``(task_id, record)`` of every indexed status of the filter, in list order."""
        return self._index.page(_buckets(state, task_type), None, None)[0]

    def list_records(
        self, *, state: str | None = None, task_type: str | None = None
    ) -> list[StatusRecord]:
        """Every indexed status record of the filter, in list order, without building models
        (``status_json(record)`` is the status as answers carry it)."""
        found, _ = self._index.page(_buckets(state, task_type), None, None)
        return [record for _, record in found]

    def list_ids(self, visible: Matcher | None = None) -> list[str]:
        """Ids of tasks with a valid status (those ``visible`` accepts), newest first."""
        if visible is not None:
            found, _ = self._index.page(_buckets(None, None), None, None, visible)
            return [task_id for task_id, _ in found]
        return self._index.ids(_buckets(None, None))

    def unfinished_statuses(self) -> list[TaskStatus] | None:
        """Every queued or running status, oldest first (by ``created_at``, then id), from
        the index; None while it is not built."""
        if not self._started:
            return None
        states = [state.value for state in TaskState if state.value not in TERMINAL_STATES]
        entries, _ = self._index.page(_buckets(None, None, states), None, None)
        found = [self.peek(task_id) for task_id, _ in entries]
        unfinished = [status for status in found if status is not None and not status.terminal]
        unfinished.sort(key=lambda status: (status.created_at, status.task_id))
        return unfinished

    def recordless_ids(self) -> list[str] | None:
        """Task folders with neither a valid status nor valid metadata, from the index;
        None while it is not built."""
        if not self._started:
            return None
        index = self._index
        with index.lock:
            active = index.active_ids()
            return sorted(t for t in active if t not in index.statuses and t not in index.metadata)

    def counts(self) -> dict[tuple[str, str], int]:
        """Tasks with a valid status by ``(task_type, state)``, from the index."""
        return self._index.counts()

    def list_results(self) -> list[TaskMetadata]:
        """Metadata of tasks that have it, by created_at desc, then task_id desc (each file
        is read: the index keeps only what lineage needs of it)."""
        with self._index.lock:
            items = list(self._index.metadata.items())
        items.sort(key=lambda item: (item[1][META_INSTANT], item[0]), reverse=True)
        found = (self.get_metadata(task_id) for task_id, _ in items)
        return [meta for meta in found if meta is not None]

    def graph(self, task_id: str) -> TaskGraph:
        """The lineage component of a task; TaskNotFound if it has no records."""
        self._require(task_id)
        return build_graph(collect_component(self._index, task_id), task_id)

    def context(self, task_id: str) -> TaskContext:
        """Records, paths and lineage of a task; TaskNotFound if it has no records."""
        status = self.get(task_id)
        metadata = self.get_metadata(task_id)
        self._require(task_id)
        nodes = collect_component(self._index, task_id)
        return TaskContext(
            task_id=task_id,
            status=status,
            metadata_exists=metadata is not None,
            metadata_path=self.workspace.relative(self.workspace.metadata_path(task_id)),
            log_path=(status.log_path or None) if status is not None else None,
            graph=build_graph(nodes, task_id),
            relations=build_relations(nodes, task_id),
        )

    def subscribe(self, callback: ChangeCallback) -> Callable[[], None]:
        """Call ``callback(task_id, file_name)`` on every change; returns the unsubscribe."""
        with self._subscribers_lock:
            self._subscribers = [*self._subscribers, callback]

        def unsubscribe() -> None:
            with self._subscribers_lock:
                remaining = list(self._subscribers)
                if callback in remaining:
                    remaining.remove(callback)
                self._subscribers = remaining

        return unsubscribe

    def _require(self, task_id: str) -> None:
        parse_task_id(task_id)
        if not self._has_records(task_id):
            self.refresh(task_id)
            if not self._has_records(task_id):
                raise TaskNotFound(task_id)

    def _has_records(self, task_id: str) -> bool:
        return task_id in self._index.statuses or task_id in self._index.metadata

    def _make_type_dirs(self) -> None:
        for task_type in TASK_TYPES:
            try:
                self.workspace.type_dir(task_type).mkdir(parents=True, exist_ok=True)
            except OSError:
                log.warning("cannot create %s; it is not watched", task_type)

    def _load(self, folders: list[TaskFolder]) -> None:
        total = len(folders)

        def scanned(count: int) -> None:
            self.progress = (min(self.progress[0] + count, total), total)

        self._indexing = True
        try:
            with _gc_paused(freeze=total >= self.freeze_min_folders):
                if self._keeper is not None:
                    self._load_kept(folders, scanned)
                else:
                    found = scan_all(folders, on_scanned=scanned)
                    with self._index.lock:  # reads wait this short moment, then apply again
                        self._index.load(found)
                        self._indexing = False
        finally:
            self._indexing = False
        self.progress = (total, total)

    def _load_kept(self, folders: list[TaskFolder], scanned: Callable[[int], None]) -> None:
        """The load through the snapshot keeper; should the snapshot's records not fit the
        index (a format changed without its number), the folders are all read instead."""
        assert self._keeper is not None
        try:
            kept, read = self._keeper.initial(folders, scanned)
            with self._index.lock:
                if kept is None:
                    self._index.load(read)
                else:
                    self._index.load_kept(kept, read)
                self._indexing = False
            return
        except (TypeError, ValueError, LookupError, AttributeError) as exc:
            log.warning("the index snapshot is not used: its records do not fit (%r)", exc)
        self._index = TaskIndex()
        self._keeper = self._keeper.anew(self._index)
        self.progress = (0, len(folders))
        _, read = self._keeper.initial(folders, scanned)
        with self._index.lock:
            self._index.load(read)
            self._indexing = False

    def _catch_up(self, scanned: list[TaskFolder], since_ns: int, everything: bool) -> None:
        """Take in what changed between the scan and the watches.

        Read again: in every type folder with ``everything``, else only in those whose own
        mtime shows a folder was added, renamed or removed there since the scan began,
        the folders that appeared or went (by a new listing) and those modified since
        (atomic record writes and replacements change a folder's mtime); and, for a
        sparse watch, every active task (the only ones it follows) but those whose stamp
        shows them unchanged since they were read (with a snapshot keeper). A workspace at
        rest is not listed twice.
        """
        threshold = since_ns - CATCH_UP_SLACK_NS
        busy = set(TASK_TYPES) if everything else self._types_changed_since(threshold)
        if busy:
            self._catch_up_types(scanned, busy, threshold)
        if not everything:
            root = str(self.workspace.root)
            active = self._index.active_ids()
            unchanged = self._keeper.unchanged(active, scanned) if self._keeper else set()
            for task_id in active - unchanged:
                self._refresh(task_id, os.path.join(root, _type_of(task_id), task_id))

    def _catch_up_types(self, scanned: list[TaskFolder], types: set[str], threshold: int) -> None:
        inodes = {task_id: inode for task_id, _, inode in scanned if _type_of(task_id) in types}
        listed = list_task_folders(self.workspace.root, known=inodes, types=types)
        for task_id in inodes.keys() - {task_id for task_id, _, _ in listed}:
            self._refresh(task_id, self.workspace.task_dir(task_id))
        for task_id, path, inode in listed:
            if inodes.get(task_id) != inode or _mtime_ns(path) >= threshold:
                self._refresh(task_id, path)

    def _types_changed_since(self, threshold_ns: int) -> set[str]:
        return {
            task_type
            for task_type in TASK_TYPES
            if _mtime_ns(str(self.workspace.type_dir(task_type))) >= threshold_ns
        }

    def _refresh(self, task_id: str, task_dir: Path | str) -> bool:
        with self._index.lock:
            found = read_folder(task_dir, task_id, self._index.statuses.get(task_id))
            if self._indexing:
                return found.exists  # the scan takes it in, or its catch-up
            held = self._held(task_id)
            if held is not None and found.exists:
                parsed = parse_status(held, task_id)
                found = found._replace(status=parsed[0] if parsed else found.status)
            self._apply_found(task_id, found)
        return found.exists

    def _apply_found(self, task_id: str, found: FolderRecords) -> None:
        """Under the lock: the index takes what one read of the task's folder found."""
        before = (self._index.statuses.get(task_id), self._index.metadata.get(task_id))
        self._active_changed(self._index.apply_folder(task_id, found))
        if before != (found.status, found.metadata):
            self._records_changed(task_id)

    def take_created(self, status: TaskStatus) -> None:
        """A task folder this process has just made, ``status`` its only record (a submit):
        indexed from the status itself, not read back from the files it was written to
        a moment ago (the watcher's event for the new folder follows and reads them)."""
        task_id = status.task_id
        record = status_record(status, task_id)
        with self._index.lock:
            if record is None or self._held(task_id) is not None:
                self.refresh(task_id)  # not a status of its own folder: what the files say
            elif not self._indexing:  # else the scan takes it in, or its catch-up
                self._apply_found(task_id, FolderRecords(True, record, None))

    def _records_changed(self, task_id: str) -> None:
        if self._keeper is not None:
            self._keeper.changed(task_id)

    def _active_ids(self) -> set[str]:
        return self._index.active_ids()

    def _active_changed(self, changed: bool) -> None:
        if changed and self._watcher is not None:
            self._watcher.request_resync()

    def _on_changes(self, changes: Changes) -> None:
        notices: list[tuple[str, str]] = []
        for task_id, names in sorted(changes.items()):
            notices.extend(self._take_change(task_id, names))
        for task_id, name in notices:
            self._notify(task_id, name)

    def _take_change(self, task_id: str, names: set[str]) -> list[tuple[str, str]]:
        task_dir = self.workspace.task_dir(task_id)
        if names == {EVENTS_FILE}:
            return [(task_id, EVENTS_FILE)]
        if not self._refresh(task_id, task_dir):
            return [(task_id, FOLDER)]
        if FOLDER in names:
            names = names | {name for name in RECORD_FILES if os.path.lexists(task_dir / name)}
        return [(task_id, name) for name in sorted(names - {FOLDER})]

    def _notify(self, task_id: str, name: str) -> None:
        for callback in self._subscribers:
            try:
                callback(task_id, name)
            except Exception:
                log.exception("change subscriber failed for %s %s", task_id, name)


def _both(first: Matcher | None, second: Matcher | None) -> Matcher | None:
    if first is None or second is None:
        return first or second
    return lambda task_id, record: first(task_id, record) and second(task_id, record)


def _type_of(task_id: str) -> str:
    return task_id[: task_id.find("#")]


def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path, follow_symlinks=False).st_mtime_ns
    except OSError:
        return 0


@contextmanager
def _gc_paused(freeze: bool) -> Iterator[None]:
    """Cyclic GC off while the index is built: it allocates only acyclic records, and
    collections triggered by 100,000 allocations would double the build time. With
    ``freeze``, everything then alive moves out of the collector's sight (``gc.freeze``)
    before it is on again: its first collection would look at each record once (2.7
    million objects, 0.7 s at 1,000,000 tasks) only to find that none can be in a cycle.
    The price: a cycle among objects alive at that moment is never collected."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()


def _buckets(
    state: str | None, task_type: str | None, states: list[str] | None = None
) -> list[tuple[str, str]]:
    if states is None:
        states = [s.value for s in TaskState] if state is None else [_state(state).value]
    if task_type is not None and task_type not in TASK_TYPES:
        raise InvalidInput(
            f"Invalid task_type {task_type!r}: use one of {', '.join(sorted(TASK_TYPES))}"
        )
    types = [task_type] if task_type is not None else sorted(TASK_TYPES)
    return [(kind, s) for kind in types for s in states]


def _state(state: str) -> TaskState:
    try:
        return TaskState(state)
    except ValueError as exc:
        allowed = ", ".join(s.value for s in TaskState)
        raise InvalidInput(f"Invalid state {state!r}: use one of {allowed}") from exc
