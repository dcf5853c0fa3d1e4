"""``restart_service``: a graceful re-exec of the server, answered before it happens.

    request_restart(record_path)   # in the request: SIGTERM to itself a moment later
    ...                            # the orderly stop of api/stopping.py runs as for any stop
    reexec_if_requested()          # serve(), once stopped: os.execv of the same command line

The stop is the ordinary one: listeners drain, the supervisor stops watching, and running
tasks and agent runs keep going. The same process (same pid) then starts over from its
original command line (``sys.orig_argv``: interpreter options and ``-m runyard serve …``
included) in the same working directory, and the new server adopts the runs it finds,
as any restart does. A stop that overruns its bound (api/stopping.py) ends the process
instead: no re-exec then.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from runyard.api.selfupdate import save

log = logging.getLogger("runyard.api")

ANSWER_DELAY_SECONDS = 0.2  # the answer leaves before the stop begins
_requested: list[Path] = []  # the record of the restart asked for (one at a time)


def request_restart(record: Path) -> None:
    """Stop this server (as SIGTERM does) shortly, then re-exec it (:func:`reexec_if_requested`)."""
    _requested[:] = [record]
    loop = asyncio.get_running_loop()
    loop.call_later(ANSWER_DELAY_SECONDS, os.kill, os.getpid(), signal.SIGTERM)


def restart_requested() -> bool:
    return bool(_requested)


def reexec_if_requested() -> None:
    """Replace this stopped server by a fresh one with the same command line, if a
    restart was asked for; returns only when none was (or the exec failed)."""
    if not _requested:
        return
    path = _requested.pop()
    argv = list(sys.orig_argv)
    record = _read(path)
    log.info("restarting: %s", " ".join(argv))
    logging.shutdown()  # the log's handlers flushed: exec keeps no buffers
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        if record is not None:
            record["phase"] = "restarting"
            save(path, record)
        os.execv(sys.executable, argv)
    except OSError as exc:
        if record is not None:
            record.update(phase="failed", error=f"Restart failed: {exc}")
            save(path, record)
        raise


def _read(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
