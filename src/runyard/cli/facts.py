"""What ``runyard config`` and ``runyard info`` report: the effective settings with where
each came from (secrets masked), and the facts of this installation and workspace.

    rows = effective_settings(settings, origins)   # {name: {"value": ..., "source": ...}}
    facts = installation_facts(settings)           # version, server, sandbox, cgroups, disk
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runyard.config import Settings

MASK = "********"
# a value under such a key is a credential: shown as set, never shown
SECRET_KEY = re.compile(r"(^|_)(token|secret|password|passwd|api_key|credentials?)$", re.I)
MIB = 1 << 20


def effective_settings(settings: Settings, origins: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Every setting's value (JSON form, credentials masked) and its source."""
    values = masked(settings.model_dump(mode="json"))
    return {
        name: {"value": values[name], "source": origins.get(name, "default")}
        for name in type(settings).model_fields
    }


def masked(value: Any, key: str = "") -> Any:
    """``value`` with every credential replaced by a mask (``None`` stays ``None``)."""
    if isinstance(value, dict):
        return {k: masked(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(item, key) for item in value]
    if SECRET_KEY.search(key) and value not in (None, ""):
        return MASK
    return value


def installation_facts(settings: Settings) -> dict[str, Any]:
    """Version, Python, workspace, server, task definitions, executors, sandbox, cgroups
    and free disk, as one JSON-ready mapping."""
    workspace = Path(os.path.abspath(settings.workspace_dir))
    return {
        "version": runyard_version(),
        "python": {"version": sys.version.split()[0], "executable": sys.executable},
        "workspace": {"path": str(workspace), "exists": workspace.is_dir()},
        "server": server_facts(workspace),
        "task_definitions": task_definition_count(),
        "executor": {
            "tasks": task_executor_facts(settings),
            "agent_runs": settings.agent_executor,
        },
        "sandbox": sandbox_facts(settings),
        "cgroups": cgroup_facts(),
        "disk": disk_facts(workspace, settings.min_free_mb),
    }


def runyard_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("runyard")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


def server_facts(workspace: Path) -> dict[str, Any]:
    """The recorded server (never its token) and whether it answers ``/health`` now."""
    from runyard.client.discovery import SERVER_FILE, read_record
    from runyard.workspace.atomic import read_json_tolerant

    recorded = read_json_tolerant(workspace / SERVER_FILE) or {}
    alive = read_record(workspace)
    running = alive is not None and _answers(str(alive["url"]))
    return {"url": recorded.get("url"), "pid": recorded.get("pid"), "running": running}


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url.rstrip("/") + "/health", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def task_definition_count() -> int:
    from runyard.tasks.registry import TaskRegistry

    return len(TaskRegistry.load().tasks)


def task_executor_facts(settings: Settings) -> str:
    """Where task workers run: this host (pre-forked or not), or Kubernetes, and for which
    task definitions the other (``task_executors``)."""
    local = "local, pre-forked" if settings.prefork else "local"
    default = local if settings.task_executor == "local" else "kubernetes"
    others = sorted(t for t, e in settings.task_executors.items() if e != settings.task_executor)
    if not others:
        return default
    other = "kubernetes" if settings.task_executor == "local" else "local"
    return f"{default}; {other} for {', '.join(others)}"


def sandbox_facts(settings: Settings) -> dict[str, Any]:
    from runyard.executors.sandbox import find_bwrap, probe_bwrap

    bwrap = find_bwrap()
    problem = probe_bwrap(bwrap)
    return {
        "setting": settings.agent_sandbox,
        "bwrap": bwrap,
        "available": problem is None,
        "problem": problem,
    }


def cgroup_facts() -> dict[str, Any]:
    """``cgroup2``/``cgroup1`` with what it can limit, else ``none`` (limits by setrlimit)."""
    from runyard.executors.cgroups import detect_host

    host = detect_host()
    if host is None:
        return {"mode": "none", "limitable": [], "note": "limits fall back to setrlimit"}
    return {"mode": host.version, "limitable": sorted(host.limitable)}


def disk_facts(workspace: Path, min_free_mb: int) -> dict[str, Any]:
    """Free space where the workspace is (or would be made: its nearest existing folder)."""
    where = workspace
    while not where.exists() and where != where.parent:
        where = where.parent
    usage = shutil.disk_usage(where)
    return {"path": str(where), "free_mb": usage.free // MIB, "min_free_mb": min_free_mb}
