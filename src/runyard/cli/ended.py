"""How a task that was waited for and did not succeed ends the command (``run``,
``submit --wait``, ``wait``): exit 1, as every failure does (:mod:`runyard.cli.errors`),
never the task's own exit code, which a shell would read as a different kind of failure
(124 a timeout, 130 an interrupt). The task's code is in the message on stderr and in the
status ``--json`` prints (``exit_code``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from runyard.cli.common import fail
from runyard.cli.errors import EXIT_FAILED

if TYPE_CHECKING:
    from runyard.workspace.records import TaskStatus

ERROR_SHOWN = 300  # characters of the task's error in the one-line message


def ended_badly(status: TaskStatus) -> NoReturn:
    """Say how the task ended on stderr and exit 1."""
    fail(ended_message(status), EXIT_FAILED)


def ended_message(status: TaskStatus) -> str:
    """``task <id> failed with exit code 3: <the first line of its error>``."""
    if status.state == "cancelled":
        return f"task {status.task_id} was cancelled (exit code {status.exit_code})"
    said = f"task {status.task_id} {status.state} with exit code {status.exit_code}"
    lines = status.error.strip().splitlines()
    if not lines:
        return said
    first = lines[0] if len(lines[0]) <= ERROR_SHOWN else lines[0][:ERROR_SHOWN] + "…"
    return f"{said}: {first}"
