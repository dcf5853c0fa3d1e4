"""Cgroups of ended runs: removed at a supervisor's start, and swept while it runs.

    sweeper = CgroupSweeper(host, watched, recorded)
    sweeper.start()     # a thread: the first pass at once, then one every SWEEP_SECONDS
    sweeper.ask_records()   # one more pass with the records, soon (after a reconcile)
    sweeper.stop()

Whoever watches a run removes its cgroup when it ends (the supervisor; the reaper of a
foreground ``runyard run``). A run that ends while nobody watches it (its server killed,
``runyard run --detach`` with no server, a file-mode ``runyard mcp`` that has exited)
leaves its cgroup behind, empty. The next supervisor of the workspace (``serve``, or a
file-mode ``runyard mcp``) removes those:

* in its first pass, as its start begins, and once more when the start has reconciled the
  unfinished runs (a run may end in between): the cgroup of every run whose end the
  workspace records (``recorded``: a task's final status or a kept earlier run, an agent
  run the store holds as ended);
* in every pass: each runyard cgroup (:data:`PREFIXES`) in its cgroup folders that is
  empty, older than :data:`STALE_SECONDS` and not of a run it watches. A launch joins the
  cgroup it made within milliseconds, so such a cgroup's run has ended, whichever workspace
  on this machine it was of (its own supervisor would have removed it at the end).

A cgroup with a process in it (``cgroup.procs`` of any of its hierarchies; on cgroup v2
``populated 1`` in ``cgroup.events``, which counts descendants too) is never removed,
whatever its record says; the kernel refuses to remove a busy cgroup anyway, so a process
that joins between the look and the removal keeps it. The age is the folder's mtime, which
the kernel sets when the cgroup is made (a process joining leaves it). The pre-forked
launcher's spares are swept by :func:`runyard.executors.prefork.sweep_spares`.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from runyard.executors.cgroups import CgroupHost
from runyard.executors.containment import AGENT_PREFIX, LAUNCH_PREFIX, TASK_PREFIX

__all__ = ["PREFIXES", "CgroupSweeper", "run_cgroups", "sweep_once"]

log = logging.getLogger(__name__)
PREFIXES = (TASK_PREFIX, AGENT_PREFIX, LAUNCH_PREFIX)
SWEEP_SECONDS = 30.0
STALE_SECONDS = 60.0
NAMES_LOGGED = 10

Watched = Callable[[], set[str]]
"""The cgroup names of the runs a supervisor watches now."""
Recorded = Callable[[set[str]], set[str]]
"""Of the cgroup names given, those of runs whose end the workspace records."""


class CgroupSweeper:
    """One thread removing the cgroups of ended runs (see the module's docstring)."""

    def __init__(
        self, host: CgroupHost, watched: Watched, recorded: Recorded,
        interval: float = SWEEP_SECONDS,
    ) -> None:  # fmt: skip
        self.host = host
        self.watched = watched
        self.recorded = recorded
        self.interval = interval
        self._stopped = threading.Event()
        self._wake = threading.Event()
        self._records_asked = True  # the first pass asks them
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name="runyard-cgroup-sweep", daemon=True
            )
            self._thread.start()

    def ask_records(self) -> None:
        """Make a pass that asks the records too, soon (later leftovers go by their age)."""
        self._records_asked = True
        self._wake.set()

    def stop(self) -> None:
        """Stop sweeping; a pass under way ends on its own (it only removes empty folders)."""
        self._stopped.set()
        self._wake.set()
        self._thread = None

    def _loop(self) -> None:
        while not self._stopped.is_set():
            self._wake.clear()
            asked, self._records_asked = self._records_asked, False
            self._pass(self.recorded if asked else None)
            self._wake.wait(self.interval)

    def _pass(self, recorded: Recorded | None) -> None:
        try:
            removed = sweep_once(self.host, self.watched(), recorded)
        except Exception:  # the next pass tries again; a sweep never stops the server
            log.exception("sweeping the cgroups of ended runs failed")
            return
        if removed:
            shown = ", ".join(removed[:NAMES_LOGGED]) + (", ..." if removed[NAMES_LOGGED:] else "")
            log.info("removed %d cgroups of ended runs: %s", len(removed), shown)


def sweep_once(
    host: CgroupHost, watched: set[str], recorded: Recorded | None = None,
    now: float | None = None,
) -> list[str]:  # fmt: skip
    """One pass: remove the empty runyard cgroups not in ``watched`` that are older than
    :data:`STALE_SECONDS`, or (with ``recorded``) whose run's end is recorded; the names
    removed, sorted."""
    now = time.time() if now is None else now
    empty = {
        name: folders
        for name, folders in run_cgroups(host).items()
        if name not in watched and all(map(is_empty, folders))
    }
    stale = {name for name, folders in empty.items() if _age(folders, now) >= STALE_SECONDS}
    young = set(empty) - stale
    ended = recorded(young) & young if recorded is not None and young else set()
    return [name for name in sorted(stale | ended) if remove_empty(empty[name])]


def run_cgroups(host: CgroupHost) -> dict[str, list[Path]]:
    """Every runyard cgroup in ``host``'s folders: name -> its folder in each hierarchy."""
    found: dict[str, list[Path]] = {}
    for base in host.bases.values():
        try:
            with os.scandir(base) as entries:
                for entry in entries:
                    if entry.name.startswith(PREFIXES) and entry.is_dir(follow_symlinks=False):
                        found.setdefault(entry.name, []).append(Path(entry.path))
        except OSError:
            continue
    return found


def is_empty(folder: Path) -> bool:
    """No process in the cgroup ``folder`` (v2: nor in one below it); False if unreadable."""
    try:
        events = folder / "cgroup.events"  # cgroup v2 only
        if events.exists():
            return "populated 0" in events.read_text().splitlines()
        return not (folder / "cgroup.procs").read_text().split()
    except OSError:
        return False


def remove_empty(folders: list[Path]) -> bool:
    """Remove the folders of one cgroup; False when one is busy (a process joined, or a
    cgroup was made below it) or cannot be removed."""
    removed = True
    for folder in folders:
        try:
            folder.rmdir()
        except FileNotFoundError:
            continue
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                log.warning("cannot remove cgroup %s: %s", folder, exc)
            removed = False
    return removed


def _age(folders: list[Path], now: float) -> float:
    """Seconds since the youngest of ``folders`` was made (0 when one cannot be read)."""
    try:
        return now - max(folder.stat().st_mtime for folder in folders)
    except OSError:
        return 0.0
