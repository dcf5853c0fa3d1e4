"""The start-up scan, shared with a helper process when there are many folders and cores.

Reading and validating 100,000 records is CPU-bound Python, and the GIL rules threads
out: from ``PARALLEL_MIN_FOLDERS`` folders on, with two cores or more, a second
interpreter scans about half of the folders while this one scans the rest, then sends
its compact records back (pickled, over a pipe). If the helper cannot start, fails or
answers anything unexpected, its half is scanned here: the result never depends on it. A
whole answer is kept even when the helper is slow to end afterwards (it is killed then).

The helper runs :func:`main`: pickled ``(task_id, path)`` pairs on stdin, pickled
``(task_id, FolderRecords)`` pairs on stdout; or, for a stamped scan (what an index
snapshot keeps, :mod:`runyard.repository.snapshot`), a pickled ``("scan", salt,
racy_from_ns, [(task_id, path, inode)])`` on stdin and ``(task_id, FolderRecords, stamp)``
on stdout; or, to check a snapshot's entries, ``("stamps", salt, racy_from_ns, [(path,
inode)])`` and the stamp of each folder as it is now.
"""

from __future__ import annotations

import gc
import logging
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO, TypeGuard

from runyard.faults import fault_delay
from runyard.repository.records import FolderRecords, TaskFolder, scan_folder
from runyard.repository.snapshot import Stamper

log = logging.getLogger(__name__)

PARALLEL_MIN_FOLDERS = 20_000
HELPER_EXIT_SECONDS = 10
# The helper spends its first few tenths of a second importing; give it a little less.
HERE_SHARE = 0.55
HELPER = "from runyard.repository.scan import main; main()"
Scanned = list[tuple[str, FolderRecords]]
Stamped = list[tuple[str, FolderRecords, int]]
Progress = Callable[[int], None]
PROGRESS_EVERY = 1000  # folders between two progress reports


def scan_all(
    folders: list[TaskFolder],
    *,
    parallel_min: int = PARALLEL_MIN_FOLDERS,
    python: str = sys.executable,
    on_scanned: Progress | None = None,
) -> Scanned:
    """``(task_id, FolderRecords)`` of every folder, in the order given; ``on_scanned(n)``
    is told of each batch of ``n`` folders read (for the progress ``/health`` shows)."""
    if len(folders) < parallel_min or _cores() < 2:
        return _scan(folders, on_scanned)
    split = int(len(folders) * HERE_SHARE)
    helper = _start_helper(python, folders[split:])
    mine = _scan(folders[:split], on_scanned)
    theirs = _collect(helper, folders[split:], on_scanned)
    return mine + theirs


def scan_stamped(
    folders: list[TaskFolder],
    stamper: Stamper,
    *,
    parallel_min: int = PARALLEL_MIN_FOLDERS,
    python: str = sys.executable,
    on_scanned: Progress | None = None,
) -> Stamped:
    """:func:`scan_all`, each folder with its stamp (:meth:`Stamper.capture`)."""
    if len(folders) < parallel_min or _cores() < 2:
        return _scan_stamped(folders, stamper, on_scanned)
    split = int(len(folders) * HERE_SHARE)
    helper = _start_helper(python, ("scan", stamper.salt, stamper.racy_from_ns, folders[split:]))
    mine = _scan_stamped(folders[:split], stamper, on_scanned)
    found = _receive(helper) if helper is not None else None
    expected = [task_id for task_id, _, _ in folders[split:]]
    if found is None or not _matches_stamped(found, expected):
        if helper is not None:
            log.warning("the scan helper failed; scanning its half here")
        return mine + _scan_stamped(folders[split:], stamper, on_scanned)
    if on_scanned is not None:
        on_scanned(len(found))
    return mine + found


def start_stamping(
    folders: list[TaskFolder],
    stamper: Stamper,
    *,
    parallel_min: int = PARALLEL_MIN_FOLDERS,
    python: str = sys.executable,
) -> tuple[int, subprocess.Popen[bytes] | None]:
    """Have a helper compute the stamps of the folders from the split point returned on
    (none with few folders or one core): the caller stamps those before it meanwhile."""
    if len(folders) < parallel_min or _cores() < 2:
        return len(folders), None
    split = int(len(folders) * HERE_SHARE)
    pairs = [(path, inode) for _, path, inode in folders[split:]]
    return split, _start_helper(python, ("stamps", stamper.salt, stamper.racy_from_ns, pairs))


def collect_stamps(
    helper: subprocess.Popen[bytes] | None, folders: list[TaskFolder], stamper: Stamper
) -> list[int]:
    """The helper's stamps of ``folders``; computed here if it failed."""
    found = _receive(helper) if helper is not None else None
    if (
        isinstance(found, list)
        and len(found) == len(folders)
        and all(type(stamp) is int for stamp in found)
    ):
        return found
    if helper is not None:
        log.warning("the stamp helper failed; stamping its half here")
    return stamper.stamps_now((path, inode) for _, path, inode in folders)


def _scan_stamped(
    folders: list[TaskFolder], stamper: Stamper, on_scanned: Progress | None = None
) -> Stamped:
    found: Stamped = []
    for start in range(0, len(folders), PROGRESS_EVERY):
        batch = folders[start : start + PROGRESS_EVERY]
        for task_id, path, inode in batch:
            records, stamp = stamper.capture(path, task_id, inode)
            found.append((task_id, records, stamp))
        if on_scanned is not None:
            on_scanned(len(batch))
        fault_delay("index.batch")
    return found


def _scan(folders: list[TaskFolder], on_scanned: Progress | None = None) -> Scanned:
    if on_scanned is None:
        return [(task_id, scan_folder(path, task_id)) for task_id, path, _ in folders]
    found: Scanned = []
    for start in range(0, len(folders), PROGRESS_EVERY):
        batch = folders[start : start + PROGRESS_EVERY]
        found += [(task_id, scan_folder(path, task_id)) for task_id, path, _ in batch]
        on_scanned(len(batch))
        fault_delay("index.batch")
    return found


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _start_helper(python: str, job: object) -> subprocess.Popen[bytes] | None:
    """The helper, fed ``job`` (a list of folders, or a stamped job) from a thread."""
    if isinstance(job, list):
        job = [(task_id, path) for task_id, path, _ in job]
    try:
        helper = subprocess.Popen(
            [python, "-c", HELPER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
    except OSError as exc:
        log.warning("no scan helper (%s); scanning in one process", exc)
        return None
    assert helper.stdin is not None
    threading.Thread(target=_send, args=(helper.stdin, job), daemon=True).start()
    return helper


def _send(stream: IO[bytes], job: object) -> None:
    """Feed the helper from a thread: it reads only once its imports are done."""
    try:
        with stream:
            pickle.dump(job, stream, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError:
        pass


def _collect(
    helper: subprocess.Popen[bytes] | None,
    folders: list[TaskFolder],
    on_scanned: Progress | None = None,
) -> Scanned:
    found = _receive(helper) if helper is not None else None
    expected = [task_id for task_id, _, _ in folders]
    if found is None or not _matches(found, expected):
        if helper is not None:
            log.warning("the scan helper failed; scanning its half here")
        return _scan(folders, on_scanned)
    if on_scanned is not None:
        on_scanned(len(found))
    return found


def _receive(helper: subprocess.Popen[bytes]) -> object:
    assert helper.stdout is not None
    try:
        with helper.stdout:
            found = pickle.load(helper.stdout)
    except (EOFError, OSError, pickle.UnpicklingError, AttributeError, ImportError):
        helper.kill()
        helper.wait()
        return None
    try:
        code = helper.wait(timeout=HELPER_EXIT_SECONDS)
    except subprocess.TimeoutExpired:  # the whole answer is in: a slow end costs it nothing
        helper.kill()
        helper.wait()
        return found
    return found if code == 0 else None


def _matches(found: object, expected: list[str]) -> TypeGuard[Scanned]:
    return (
        isinstance(found, list)
        and len(found) == len(expected)
        and all(
            isinstance(item, tuple)
            and len(item) == 2
            and item[0] == task_id
            and isinstance(item[1], FolderRecords)
            for item, task_id in zip(found, expected, strict=True)
        )
    )


def _matches_stamped(found: object, expected: list[str]) -> TypeGuard[Stamped]:
    return (
        isinstance(found, list)
        and len(found) == len(expected)
        and all(
            isinstance(item, tuple)
            and len(item) == 3
            and item[0] == task_id
            and isinstance(item[1], FolderRecords)
            and type(item[2]) is int
            for item, task_id in zip(found, expected, strict=True)
        )
    )


def main() -> None:
    gc.disable()
    job = pickle.load(sys.stdin.buffer)
    found: list[object]
    if isinstance(job, tuple) and job[0] == "stamps":
        stamper = Stamper(job[1], job[2])
        found = list(stamper.stamps_now(job[3]))
    elif isinstance(job, tuple):
        stamper = Stamper(job[1], job[2])
        found = [(task_id, *stamper.capture(path, task_id, inode))
                 for task_id, path, inode in job[3]]  # fmt: skip
    else:
        found = [(task_id, scan_folder(path, task_id)) for task_id, path in job]
    pickle.dump(found, sys.stdout.buffer, protocol=pickle.HIGHEST_PROTOCOL)
    sys.stdout.buffer.flush()
    # ends at once: freeing half a million records one by one took seconds on a busy machine
    os._exit(0)
