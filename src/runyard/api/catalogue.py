"""The job catalogue: what ``GET /jobs`` and the MCP tools list, for the caller's scope.

Every job ``POST /jobs/<name>`` answers is listed: the seed's thirteen and the AxonX
jobs of :data:`runyard.api.compat_jobs.COMPAT_JOBS`, whatever that tuple holds. The admin
(server token) sees them all. A run token sees only the jobs it may call: the admin-only
ones (:data:`ADMIN_ONLY_JOBS`: machines, plugins, updates, ``python``, sync,
``delete_entries``, schedules and ``fork_agent_session``) are left out of its catalogue
and its MCP tools, and a call to one of them by name is refused before its handler runs::

    for job in callable_jobs(scope).values():
        ...
    refuse_admin_only(name, scope)     # Forbidden (403) for a run token
"""

from __future__ import annotations

import functools
from typing import Any

from runyard.agents.models import RunScope
from runyard.api.adminonly import ADMIN_ONLY_JOBS, may_call, refuse_admin_only
from runyard.api.compat_jobs import all_jobs
from runyard.api.jobs import JOBS, Job


def callable_jobs(scope: RunScope | None) -> dict[str, Job]:
    """Every job the caller may call, by name, the seed's first, then the others by name."""
    jobs = all_jobs()
    return {name: jobs[name] for name in _ordered(jobs) if may_call(name, scope)}


def _ordered(jobs: dict[str, Job]) -> list[str]:
    seed = [name for name in JOBS if name in jobs]
    return seed + sorted(name for name in jobs if name not in JOBS)


def catalogue_item(job: Job) -> dict[str, Any]:
    """One entry of ``GET /jobs``: the job's name, description and both schemas."""
    input_schema, output_schema = job_schemas(job)
    return {
        "name": job.name,
        "description": job.description,
        "input_schema": input_schema,
        "output_schema": output_schema,
    }


@functools.cache
def job_schemas(job: Job) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job's argument and answer JSON Schemas, made once per job: making all of them
    took about 140 ms, on the event loop, at every ``GET /jobs``. Shared: never changed."""
    return job.args.model_json_schema(), job.answer_schema()


__all__ = [
    "ADMIN_ONLY_JOBS",
    "callable_jobs",
    "catalogue_item",
    "job_schemas",
    "may_call",
    "refuse_admin_only",
]
