"""At ``serve``: the workspace and the log folder made, or closed, for ``workspace_mode``.

    changed = close_workspace(settings)   # before the lock, the log or anything else is made
    serverlog.configure(...)
    report_closed(changed, settings)      # one line in server.log when anything changed

The process's umask comes first, so everything the server and its children create from
then on has the mode's permissions (:mod:`runyard.privacy`). A workspace an older
runyard made (``0755`` folders, a ``0644`` ``state.db``) is closed at start: the workspace
root and the log folder themselves, and what lies directly in them and in ``agent/`` (the
type folders, ``state.db`` and its journal, ``server.log`` and its rotations,
``prefork.log``, ``.history``, ``.staging``, ...). Nothing deeper is walked: the start must
not grow with the number of tasks, and a root that others cannot enter closes everything
below it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from runyard.config import Settings
from runyard.privacy import Tightened, make_folder, restrict_process, tighten

log = logging.getLogger("runyard.api")
NAMED = 8  # paths named in the log line; the rest are counted


def close_workspace(settings: Settings) -> list[Tightened]:
    """Set the umask, make the two folders if missing, take away what the mode does not
    give from them and their first level; what was changed."""
    mode = settings.workspace_mode
    restrict_process(mode)
    root = Path(os.path.abspath(settings.workspace_dir))
    logs = Path(os.path.abspath(settings.log_dir))
    make_folder(root, mode)
    make_folder(logs, mode)
    folders = [root, root / "agent", logs, logs / "agent"]
    return tighten(folders, mode, passage_gid=runs_passage_gid(settings))


def runs_passage_gid(settings: Settings) -> int | None:
    """The runs' group where runs execute as another user or group than the server (it
    keeps its passage through the workspace), else None."""
    uid = os.getuid() if settings.agent_run_uid is None else settings.agent_run_uid
    gid = os.getgid() if settings.agent_run_gid is None else settings.agent_run_gid
    return None if (uid, gid) == (os.getuid(), os.getgid()) else gid


def report_closed(changed: list[Tightened], settings: Settings) -> None:
    if not changed:
        return
    named = ", ".join(str(item) for item in changed[:NAMED])
    more = f" and {len(changed) - NAMED} more" if len(changed) > NAMED else ""
    log.warning(
        "workspace_mode %s: tightened %d paths: %s%s",
        settings.workspace_mode, len(changed), named, more,
    )  # fmt: skip
