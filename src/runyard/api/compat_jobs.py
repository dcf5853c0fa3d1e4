"""Jobs beyond the seed's thirteen that AxonX clients call: ``help``, ``version``, ``diagnose``
and ``list_schedules`` (:mod:`runyard.api.schedule_jobs`).

The AxonX CLI runs ``axonx help`` and ``axonx diagnose`` as jobs of the service it points
at. They are served at ``/jobs/<name>`` like the others, and listed by ``GET /jobs`` and
as MCP tools (:mod:`runyard.api.catalogue`, which leaves the admin-only ones out for a run
token).
"""

from __future__ import annotations

import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pydantic import Field

from runyard.api import job_args as a
from runyard.api.adminonly import may_call
from runyard.api.agent_session_jobs import AGENT_SESSION_JOBS
from runyard.api.files_jobs import FILES_JOBS
from runyard.api.jobs import JOBS, Job, JobResult, Scope
from runyard.api.machine_jobs import MACHINE_JOBS
from runyard.api.plugin_jobs import PLUGIN_JOBS
from runyard.api.schedule_jobs import LIST_SCHEDULES
from runyard.api.services import Services
from runyard.api.studio_jobs import LIST_STUDIO_PAGES
from runyard.api.sync_jobs import SYNC_JOBS
from runyard.api.update_jobs import UPDATE_JOBS
from runyard.changes import ChangeHub
from runyard.workspace.space import storage_report

USAGE = (
    'POST /jobs/<name> with {"arguments": {...}}; POST /jobs/<name>/events for '
    "Server-Sent Events. help lists the jobs; help with job=<name> shows one."
)


class HelpArgs(a.Strict):
    job: str | None = Field(None, min_length=1, description="A job to inspect; omit to list")


def package_version() -> str:
    try:
        return version("runyard")
    except PackageNotFoundError:
        return "0+unknown"


def all_jobs() -> dict[str, Job]:
    return {**JOBS, **COMPAT_JOBS}


async def _help(s: Services, args: HelpArgs, hub: ChangeHub, scope: Scope) -> JobResult:
    jobs = {name: job for name, job in all_jobs().items() if may_call(name, scope)}
    if args.job is None:
        listed = [{"name": name, "description": jobs[name].description} for name in sorted(jobs)]
        return {"usage": USAGE, "jobs": listed}, True
    job = jobs.get(args.job)
    if job is None:
        raise ValueError(f"Unknown job {args.job!r}; call help without job to list the jobs")
    info = {
        "name": job.name,
        "description": job.description,
        "input_schema": job.args.model_json_schema(),
        "output_schema": job.answer_schema(),
    }
    return {"usage": USAGE, "job": info}, True


async def _version(s: Services, args: Any, hub: ChangeHub, scope: Scope) -> JobResult:
    current = package_version()
    return current, True, {"version": current}


async def _diagnose(s: Services, args: Any, hub: ChangeHub, scope: Scope) -> JobResult:
    answer = {
        "version": package_version(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "storage": storage_report(s.workspace.root, s.settings.min_free_mb),
        "tasks": [d.name for d in s.registry.definitions()],
        "plugin_errors": dict(s.registry.errors),
        "restart_required": bool(s.registry.restart_required),  # which: GET /api/v1/plugins
    }
    return answer, True


class NoFields(a.Strict):
    pass


COMPAT_JOBS: dict[str, Job] = {
    job.name: job
    for job in (
        Job(
            "help",
            "List the jobs of this service, or show one job's schemas.",
            HelpArgs,
            dict[str, Any],
            _help,
        ),
        Job("version", "The installed runyard version.", a.NoArguments, str, _version),
        LIST_SCHEDULES,
        *AGENT_SESSION_JOBS,
        *FILES_JOBS,
        *MACHINE_JOBS,
        *PLUGIN_JOBS,
        *SYNC_JOBS,
        LIST_STUDIO_PAGES,
        *UPDATE_JOBS,
        Job(
            "diagnose",
            "This service's version, Python, platform, free space and tasks.",
            NoFields,
            dict[str, Any],
            _diagnose,
        ),
    )
}
