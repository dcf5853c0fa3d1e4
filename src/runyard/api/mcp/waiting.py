"""MCP's ``wait_task``: the Job API's wait, with the run optional and the wait bounded.

An agent calling a tool blocks until it answers, so over MCP a wait never lasts longer
than its ``timeout`` (default :data:`DEFAULT_WAIT_SECONDS`, at most
:data:`MAX_WAIT_SECONDS`). When the time runs out the answer is the task's current
status, as a success with ``metadata.timed_out`` set, not an error: the run goes on and
the agent may call again. ``run_id`` defaults to the run current when the call starts.

The Job API's own ``wait_task`` (``POST /jobs/wait_task``) keeps the seed's contract:
``run_id`` required and no timeout.
"""

from __future__ import annotations

from typing import Any

import anyio
from pydantic import Field

from runyard.api import job_args as a
from runyard.api.detail import with_detail
from runyard.api.jobs import Job, JobResult, Scope, status_now, wait_until_finished
from runyard.api.services import Services
from runyard.changes import ChangeHub
from runyard.errors import RunMismatch
from runyard.runtime.attempts import follows, retry_due
from runyard.workspace.records import TaskStatus

DEFAULT_WAIT_SECONDS = 60.0
MAX_WAIT_SECONDS = 3600.0
MIN_POLL_SECONDS = 0.05
DESCRIPTION = (
    "Wait until a run ends (default: the task's current run), for at most `timeout` "
    f"seconds (default {DEFAULT_WAIT_SECONDS:.0f}, at most {MAX_WAIT_SECONDS:.0f}); answers "
    "its TaskStatus. When the time runs out first, the answer is the current status with "
    "success true and metadata.timed_out true: the run goes on, call again to keep waiting."
)


class McpWaitArgs(a.Strict):
    task_id: str = Field(min_length=1, description="Full Task ID")
    run_id: str | None = Field(
        None, min_length=1, description="The run id submit returned; default: the current run"
    )
    timeout: float = Field(
        DEFAULT_WAIT_SECONDS,
        gt=0,
        le=MAX_WAIT_SECONDS,
        description="Seconds to wait at most; then the current status is answered "
        "(metadata.timed_out) and the run goes on",
    )
    # a wait is woken by record changes; the interval only bounds each sleep, and a tiny
    # one would spin for the whole timeout
    poll_interval: float = Field(
        1.0, ge=MIN_POLL_SECONDS, le=60, description="Polling interval in seconds"
    )
    detail: a.Detail = Field("full", description=a.DETAIL_DESCRIPTION)


async def wait_bounded(s: Services, args: McpWaitArgs, hub: ChangeHub, scope: Scope) -> JobResult:
    """The run's final status, or its current one once ``args.timeout`` has passed."""
    run_id = args.run_id or (await status_now(s, args.task_id, scope)).run_id
    with anyio.move_on_after(args.timeout) as deadline:
        status = await wait_until_finished(s, hub, args.task_id, run_id, args.poll_interval, scope)
    if deadline.cancelled_caught:
        status = await status_now(s, args.task_id, scope)
        if not follows(status, run_id):  # a retry's new run follows its first attempt
            raise RunMismatch(args.task_id, run_id, status.run_id)
        if not status.terminal or retry_due(status):  # it may have ended as the time ran out
            return _answer(status, args), True, {"timed_out": True}
    return _answer(status, args), status.state == "succeeded"


def _answer(status: TaskStatus, args: McpWaitArgs) -> dict[str, Any]:
    return with_detail(status.to_json(), args.detail)


WAIT_JOB = Job("wait_task", DESCRIPTION, McpWaitArgs, TaskStatus, wait_bounded)
