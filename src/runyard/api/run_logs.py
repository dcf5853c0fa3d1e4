"""The log of a kept run (``read_log`` with the ``run_id`` of an earlier run).

Each run's log is ``<log_dir>/<task_type>/<task_id>/<run_id>.log``, derived from the ids
alone, and a rerun or a retry leaves the earlier runs' logs where they are; a run id is
read only when the task has that run (current or kept), so no id names another file.
"""

from __future__ import annotations

import os

from runyard.api.services import Services
from runyard.errors import RunMismatch
from runyard.wire import TaskStatus
from runyard.workspace.history import run_status


def kept_log_path(services: Services, current: TaskStatus, run_id: str) -> str:
    """The log path of run ``run_id`` of ``current``'s task; RunMismatch when the task has
    no such run (neither current nor kept)."""
    if run_status(services.workspace, current.task_id, run_id) is None:
        raise RunMismatch(current.task_id, run_id, current.run_id)
    return os.path.abspath(services.workspace.run_log_path(current.task_id, run_id))
