"""Named fault points in the write paths, for crash and full-disk tests only.

``RUNYARD_FAULT_POINT=<name>`` makes the process that reaches point ``<name>`` kill itself
with SIGKILL there (a crash at the worst moment, repeatable). ``RUNYARD_FAULT_ENOSPC=
<name>:<flag file>`` makes point ``<name>`` raise ``OSError(ENOSPC)`` while the flag file
exists (a full disk that can be "freed" by removing the file). Both are read once, at
import: with neither set, :func:`fault_point` is a call that returns at once.

Points: ``status`` and ``status.final`` (a status record; the second only for final
states), ``metadata``, ``events``, ``artifact`` (an artifact record), ``sqlite.commit``,
``upload.finalise``, ``submit.staged`` (a staged task folder before its rename),
``idempotency.answer`` (a keyed request's work done, its answer not yet kept),
``history.staged`` / ``history.kept`` (a replaced run's records copied to a temp folder /
renamed into ``.history``, its task folder not yet replaced), ``run.settle`` (an agent
run's final state, before the store is asked to keep it), ``backup.partial`` (``backup
create`` with its partial archive and SQLite copies half made), ``pipeline.step`` (a
pipeline run's step about to be made, after its first), ``files.write`` (each block of an
upload to ``POST /files``, before it is written).

``RUNYARD_FAULT_DELAY=<name>:<seconds>`` makes :func:`fault_delay` point ``<name>`` sleep
that long each time (a slow disk, to watch a phase from outside): ``index.batch`` (each
batch of folders the start-up scan reads), ``serve.build`` (the app's build, while the port
already answers), ``cli.wait`` (a CLI wait about to start its waiting thread),
``pipeline.step`` (each step of a pipeline run after its first, about to be made),
``pipeline.cancel`` (each step a pipeline run's cancel has just cancelled).
"""

from __future__ import annotations

import errno
import os
import signal
import time

KILL_VAR = "RUNYARD_FAULT_POINT"
ENOSPC_VAR = "RUNYARD_FAULT_ENOSPC"
POINTS = (
    "status",
    "status.final",
    "metadata",
    "events",
    "artifact",
    "sqlite.commit",
    "upload.finalise",
    "submit.staged",
    "idempotency.answer",
    "history.staged",
    "history.kept",
    "run.settle",
    "backup.partial",
    "pipeline.step",
    "files.write",
)

_KILL_AT = os.environ.get(KILL_VAR) or None
_ENOSPC_AT, _, _ENOSPC_FLAG = (os.environ.get(ENOSPC_VAR) or "").partition(":")
ACTIVE = _KILL_AT is not None or bool(_ENOSPC_AT)
DELAY_VAR = "RUNYARD_FAULT_DELAY"
_DELAY_AT, _, _DELAY_SECONDS = (os.environ.get(DELAY_VAR) or "").partition(":")


def fault_delay(name: str) -> None:
    """Sleep here when a test asked point ``name`` to be slow."""
    if _DELAY_AT and name == _DELAY_AT:
        time.sleep(float(_DELAY_SECONDS or 0))


def fault_point(name: str) -> None:
    """Crash here, or fail as a full disk would, when a test asked for point ``name``."""
    if not ACTIVE:
        return
    if name == _KILL_AT:
        os.kill(os.getpid(), signal.SIGKILL)
    if name == _ENOSPC_AT and (not _ENOSPC_FLAG or os.path.exists(_ENOSPC_FLAG)):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"fault point {name}")
