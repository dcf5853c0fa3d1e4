"""``list_schedules``: AxonX 0.2.2's job, with its parameters and answer.

Arguments ``name`` (an exact schedule name; omit for all), ``include_history`` (false) and
``history_limit`` (1 to 200, 20). The answer is a list with one object per schedule
(:mod:`runyard.schedules.describe`); a name that matches nothing answers an empty list, as
AxonX's does. Admin only: a run token is refused (403), as on ``/api/v1/schedules``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from starlette.concurrency import run_in_threadpool

from runyard.api import job_args as a
from runyard.api.jobs import Job, JobResult, Scope
from runyard.api.services import Services
from runyard.changes import ChangeHub
from runyard.errors import Forbidden
from runyard.schedules.describe import MAX_HISTORY_LIMIT, describe_all


class ListSchedulesArgs(a.Strict):
    name: str | None = Field(
        None, min_length=1, description="Exact schedule name; omit to list all schedules."
    )
    include_history: bool = Field(
        False, description="Include recent trigger history and the latest Job result."
    )
    history_limit: int = Field(
        20,
        ge=1,
        le=MAX_HISTORY_LIMIT,
        description=(
            "Maximum recent triggers per schedule, oldest first within the selected window."
        ),
    )


async def _list_schedules(
    s: Services, args: ListSchedulesArgs, hub: ChangeHub, scope: Scope
) -> JobResult:
    if scope is not None:
        raise Forbidden("list_schedules needs the server (admin) token")
    if s.schedules is None:
        return [], True
    answer = await run_in_threadpool(
        describe_all, s.schedules, args.name, args.include_history, args.history_limit
    )
    return answer, True


LIST_SCHEDULES = Job(
    "list_schedules",
    "List schedule configuration and current status; history is opt-in.",
    ListSchedulesArgs,
    list[dict[str, Any]],
    _list_schedules,
)
