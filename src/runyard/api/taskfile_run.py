"""``GET /api/v1/tasks/{task_id}/files/{path}?run_id=R``: a file of run R only.

A fixed-name rerun replaces the task folder (the replaced run is kept whole in the
history: ``GET /api/v1/tasks/{id}/runs/{run_id}/files/{path}`` serves its files,
:mod:`runyard.api.run_view`), so the files served here are always the current run's. A
caller that names the run it means gets 409 (:class:`~runyard.errors.RunMismatch`) instead
of another run's file. The current run is
read after the file was opened: had a rerun replaced the folder before the open, it
names the new run, and the file is refused.
"""

from __future__ import annotations

from runyard.agents.models import RunScope
from runyard.api.jobs import current_status
from runyard.api.services import Services
from runyard.errors import RunMismatch
from runyard.workspace.safefs import OpenedFile


def require_run(
    services: Services, task_id: str, run_id: str, opened: OpenedFile, scope: RunScope | None
) -> None:
    """Raise RunMismatch (closing ``opened``) unless ``run_id`` is the task's current run."""
    current = current_status(services, task_id, scope).run_id
    if current != run_id:
        opened.close()
        raise RunMismatch(task_id, run_id, current)
