"""Deleting an agent session: its records, then everything on disk that was its own.

    removed = remove_session(runs, store, layout, snapshots, "ses-...")

Refused with :class:`~runyard.agents.errors.RunActive` (nothing removed) while a run of the
session is queued or running: the check and the removal of the records are one store
transaction, made while the run manager holds run starts off (:meth:`RunManager.quiet`),
so no run can start in between. Then the files go: each run's folder
(``workspaces/<run-id>``) and log, the session's uploads (a fork's hard links leave the
origin's bytes in place), its state folder and its state snapshots. Runs may have left
symlinks in their folders: trees are removed with :func:`shutil.rmtree`, which on Linux
works through descriptors and unlinks a symlink without following it; a top folder that is
a symlink has the link removed, never its target. A file that cannot be removed is logged
and left (the records are gone, so nothing serves it).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from runyard.agents.errors import AgentNotFound
from runyard.agents.layout import AgentLayout
from runyard.agents.models import SessionRemoval
from runyard.agents.runs import RunManager
from runyard.agents.snapshots import Snapshots
from runyard.agents.store import AgentStore

log = logging.getLogger("runyard.agents.removal")


def remove_session(
    runs: RunManager,
    store: AgentStore,
    layout: AgentLayout,
    snapshots: Snapshots,
    session_id: str,
) -> SessionRemoval:
    with runs.quiet(session_id):
        removed = store.delete_session(session_id)
    if removed is None:
        raise AgentNotFound("session", session_id)
    for run_id in removed.run_ids:
        _remove(layout.run_dir(run_id))
        _remove(layout.log_path(run_id))
    for name in removed.stored_names:
        _remove(layout.upload_path(name))
    _remove(layout.state_dir(session_id))
    _remove(snapshots.session_dir(session_id))
    return removed


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, onerror=_left)  # onexc from Python 3.12
        else:
            path.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not remove %s of a deleted session: %s", path, exc)


def _left(function: object, path: str, excinfo: tuple[type, BaseException, object]) -> None:
    exc = excinfo[1]
    if not isinstance(exc, FileNotFoundError):
        log.warning("could not remove %s of a deleted session: %s", os.fspath(path), exc)
