"""The start-up sweep: staging and temp names a crash left, removed once a server has
started, each kind logged in one line naming what went.

Every staging or temp name runyard makes, and what removes it after a crash:

- half-made task folders (``.staging/.staging-*``, ``<type>/.removing-*``; a sync receive
  stages the same way): the supervisor's start, under each task's claim, before it
  launches anything (:mod:`runyard.runtime.orphans`);
- unfinished uploads (``agent/uploads/.partial-*``, and files never recorded) and state
  snapshots being taken (``agent/snapshots/<session>/.staging-*``): the agent service's
  start, before it takes an upload or settles a run;
- the index snapshot's temp files (``.index/.snapshot.*.tmp``): the index's start;
- here, in the background once the start-up is over: history copies a crash cut short
  (``.history/.staging/.tmp-<random>-<task id>``), removed under the task's claim (the
  copy that makes one holds it, in this server or in a CLI beside it: a copy whose task's
  claim is held is passed over, so a live one is never touched); and what killed
  ``backup create`` runs left outside the workspace (the archive's
  ``.<name>.partial-<pid>`` and its scratch folder), journaled in the workspace and
  removed once their writer's pid is gone (:mod:`runyard.backup.partials`); and the temp
  files of uploads to AxonX's ``POST /files`` a crash cut short (``tmp/<hex>/.<name>.<hex>
  .part``) last written before this server started, with their emptied folders
  (:mod:`runyard.workspace.staging_area`).

Both list one folder (``.history/.staging``, ``.partials``), whatever the number of tasks.
After them, the files of kept runs that a crash or a CLI's exit left in their entries are
stored once (:func:`runyard.workspace.dedup.dedup_all`; it walks the history's entries).
Not swept: an atomic write's temp file (``.<name>.<random>.tmp``,
:mod:`runyard.workspace.atomic`) inside a task folder, or a sync's ``.<log>.<random>.sync``
in a log folder: finding them means listing every task folder (a million listings at a
million tasks, the index's whole first scan again) for a file a kill leaves in the few
microseconds of one write. Both names are hidden, never read as records, and go with
their folder (delete, gc, a rerun's replace).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from runyard.backup.partials import sweep_partials
from runyard.runtime.creation import claim_if_free
from runyard.workspace.dedup import dedup_all
from runyard.workspace.history import (
    HISTORY_DIR,
    STAGING_DIR,
    remove_staged_copy,
    staged_copies,
)
from runyard.workspace.layout import Workspace
from runyard.workspace.staging_area import sweep_partial_uploads

log = logging.getLogger("runyard.leftovers")
SHOWN = 20  # names a line shows; the rest are counted
STOP_SECONDS = 5.0


def log_removed(kind: str, names: list[str]) -> None:
    """One line for one kind: how many went, and their names (the first :data:`SHOWN`)."""
    if not names:
        return
    shown = ", ".join(names[:SHOWN])
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    log.info("start-up sweep: removed %d %s: %s%s", len(names), kind, shown, more)


def sweep_history_temps(workspace: Workspace, stopped: Callable[[], bool] = bool) -> list[str]:
    """Remove the history copies a crash cut short, each under its task's claim; their
    workspace-relative paths. A copy whose task's claim is held now is passed over (its
    holder may be making it; the next start looks again); a name that names no task is
    no copy of ours and goes. ``stopped()`` true ends the sweep early."""
    removed = []
    for name, task_id in staged_copies(workspace):
        if stopped():
            break
        if task_id is None:
            gone = remove_staged_copy(workspace, name)
        else:
            with claim_if_free(workspace, task_id) as free:
                gone = free and remove_staged_copy(workspace, name)
        if gone:
            removed.append(f"{HISTORY_DIR}/{STAGING_DIR}/{name}")
    return removed


class LeftoverSweep:
    """Runs the sweeps this module owns in a thread of its own, once ``after`` is set (the
    start-up's end), so neither the port nor the start-up waits for it.

        sweep = LeftoverSweep(workspace, startup.ready)
        sweep.start()
        ...
        sweep.stop()  # ends a walk in progress between two tasks
    """

    def __init__(self, workspace: Workspace, after: threading.Event) -> None:
        self.workspace = workspace
        self.after = after
        self.started = time.time()  # an upload's temp file older than this is a crash's
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._run, name="runyard-sweep", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(STOP_SECONDS)

    def _run(self) -> None:
        while not self.after.wait(0.2):
            if self._stop.is_set():
                return
        for kind, sweep in self._kinds():
            try:
                log_removed(kind, sweep())
            except Exception:  # housekeeping: it must never take the server down
                log.exception("start-up sweep of %s failed", kind)
        self._store_kept_files()

    def _store_kept_files(self) -> None:
        """Store once the files of kept runs a crash or a CLI's exit left plain."""
        try:
            moved = dedup_all(self.workspace)
        except Exception:
            log.exception("start-up sweep of kept runs' files failed")
            return
        if moved:
            log.info("start-up sweep: stored %d files of kept runs once", moved)

    def _kinds(self) -> list[tuple[str, Callable[[], list[str]]]]:
        workspace, stopped = self.workspace, self._stop.is_set
        return [
            ("history temp folders", lambda: sweep_history_temps(workspace, stopped)),
            ("partial backups (archives, scratch folders)", lambda: sweep_partials(workspace.root)),
            (
                "unfinished uploads to POST /files",
                lambda: sweep_partial_uploads(workspace.root, self.started),
            ),
        ]
