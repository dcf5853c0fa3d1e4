"""What to say when a task's file is asked for before the task wrote it.

A running task writes its artifacts as it goes, so a missing file of a task that has not
ended is "not written yet", and of one that has ended "never written": both plainer than
the file system's "does not exist or is not a folder where one is needed". Used by the MCP
artifact resource and the task file download route.
"""

from __future__ import annotations

from runyard.agents.models import RunScope
from runyard.api.jobs import current_status
from runyard.api.services import Services
from runyard.errors import NoSuchFile, TaskNotFound
from runyard.workspace.safefs import MISSING


def missing_file(
    services: Services, task_id: str, path: str, exc: NoSuchFile, scope: RunScope | None
) -> NoSuchFile:
    """The error for ``path`` of ``task_id`` that :func:`open_under` found missing
    (``exc``), saying whether the task may still write it; any other refusal (a folder,
    an unreadable file) is answered as it was."""
    if not exc.reason.endswith(MISSING):
        return exc
    try:
        status = current_status(services, task_id, scope)
    except TaskNotFound:  # a task folder with no status: nothing more to say
        return exc
    if not status.terminal:
        return NoSuchFile(
            path,
            f"not written yet: task {task_id} is {status.state.value}; wait until it ends "
            "(wait_task) and read it again",
        )
    return NoSuchFile(path, f"task {task_id} ended {status.state.value} without writing it")
