"""``machine_status`` and ``list_machines``: AxonX 0.2.2's machine jobs.

Neither takes arguments (AxonX declares none, so extra ones are ignored as AxonX ignores
them). ``machine_status`` answers this machine's CPU, memory and GPUs with runyard's build
(:mod:`runyard.machine`); ``list_machines`` answers ``[{address, healthy}]``, one row per
``targets`` entry (:mod:`runyard.api.machine_health`). Both are admin only: a run token is
refused (403), since they describe the host and the server's other machines.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool

from runyard.api import job_args as a
from runyard.api.jobs import Job, JobResult, Scope
from runyard.api.machine_health import check_targets
from runyard.api.services import Services
from runyard.changes import ChangeHub
from runyard.errors import Forbidden
from runyard.machine.metrics import machine_info
from runyard.machine.models import MachineHealth, MachineInfo


def _admin_only(name: str, scope: Scope) -> None:
    if scope is not None:
        raise Forbidden(f"{name} needs the server (admin) token")


async def _machine_status(
    s: Services, args: a.NoArguments, hub: ChangeHub, scope: Scope
) -> JobResult:
    _admin_only("machine_status", scope)
    info = await run_in_threadpool(machine_info)  # psutil samples the CPU for 0.1 s
    return info.model_dump(mode="json"), True


async def _list_machines(
    s: Services, args: a.NoArguments, hub: ChangeHub, scope: Scope
) -> JobResult:
    _admin_only("list_machines", scope)
    rows = await check_targets(s.settings.targets, s.settings.machine_check_timeout_seconds)
    return [row.model_dump(mode="json") for row in rows], True


MACHINE_JOBS = (
    Job(
        "machine_status",
        "This machine's CPU, memory and GPUs, with the runyard build.",
        a.NoArguments,
        MachineInfo,
        _machine_status,
    ),
    Job(
        "list_machines",
        "Check the health of every configured remote machine (targets).",
        a.NoArguments,
        list[MachineHealth],
        _list_machines,
    ),
)
