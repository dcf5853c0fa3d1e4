"""The jobs a run token may never call, whatever its session (issue 46): they act on the
machine, the server's own environment or every task, not on the run's own work. Used by
the catalogue (:mod:`runyard.api.catalogue`), the job routes, the MCP tools and ``help``.
"""

from __future__ import annotations

from runyard.agents.models import RunScope
from runyard.errors import Forbidden

# AxonX's jobs a run token may never call (issue 46): whatever its session, these act on
# the machine, the server's own environment or every task, not on the run's own work
ADMIN_ONLY_JOBS = frozenset(
    {
        "machine_status",
        "list_machines",
        "list_plugins",
        "inspect_plugin",
        "install_plugin",
        "uninstall_plugin",
        "get_update_status",
        "update_from_pip",
        "update_from_git",
        "restart_service",
        "python",
        "task_sync_index",
        "sync_tasks",
        "delete_entries",
        "list_schedules",
        "fork_agent_session",  # a fork is a new session, which a run may not make
    }
)


def may_call(name: str, scope: RunScope | None) -> bool:
    """Whether the caller of ``scope`` (None: the admin) may call the job ``name``."""
    return scope is None or name not in ADMIN_ONLY_JOBS


def refuse_admin_only(name: str, scope: RunScope | None) -> None:
    """Forbidden for a run token calling an admin-only job."""
    if not may_call(name, scope):
        raise Forbidden(f"{name} needs the server (admin) token; a run token may not call it")
