"""Pipeline runs on a supervisor: made all or nothing, viewed live, cancelled.

    run = start_run(supervisor, body, submitted_by)      # InvalidPipeline: nothing made
    answer = run_view(workspace, run)                    # the steps with their live states
    cancelled = cancel_run(supervisor, run)              # the task ids this call cancelled

:func:`start_run` checks the whole request first (:mod:`runyard.runtime.pipelines.plan`),
then submits every step, upstreams first, each with ``depends_on`` its upstreams' task ids,
while the supervisor launches nothing; should a submit still fail (a full disk), the steps
made so far are cancelled and deleted before the error goes on. The run's record is written
last (:mod:`runyard.runtime.pipelines.records`).

:func:`cancel_run` cancels the unfinished steps, dependents before their upstreams, so a
step still waiting ends ``cancelled`` itself rather than ``failed`` with ``upstream failed``.
"""

from __future__ import annotations

import logging
from typing import Any

from runyard.errors import InvalidPipeline, TaskNotFound
from runyard.faults import fault_delay, fault_point
from runyard.runtime.liveness import settle
from runyard.runtime.pipelines.plan import Plan, make_plan
from runyard.runtime.pipelines.records import (
    PipelineRun,
    StepRecord,
    new_run_id,
    write_run,
)
from runyard.runtime.submitters import Submitter, own_status
from runyard.runtime.supervisor import Supervisor
from runyard.runtime.taskcache import with_served
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskState, TaskStatus, utcnow
from runyard.workspace.space import is_space_error, storage_error

log = logging.getLogger(__name__)
RUN_ID_ATTEMPTS = 16
STEP_FIELDS = ("run_id", "created_at", "started_at", "finished_at", "error", "waiting_for")


def start_run(
    supervisor: Supervisor, body: object, submitted_by: Submitter, run_id: str | None = None
) -> PipelineRun:
    """Make every step of the run ``body`` asks for and its record; the record. ``run_id``
    (one :func:`new_run_id` made, kept for a request's Idempotency-Key) names the run,
    else a fresh one does."""
    run_id, plan = _fresh_plan(supervisor, body, run_id)
    made: list[str] = []
    served: dict[str, str] = {}  # planned task id -> the task a cached result answered with
    # the steps made are removed before launches resume: none may start and then be cut
    with supervisor.launches_held():
        try:
            for step in plan.steps:
                if made:
                    fault_delay("pipeline.step")
                    fault_point("pipeline.step")
                upstreams = with_served(step.upstream_ids(plan.ids()), served)
                inputs = with_served(step.inputs, served)
                handle = supervisor.submit(step.task, inputs, submitted_by, depends_on=upstreams)
                if handle.cached:  # nothing made: later steps name the task that answered
                    served[step.task_id] = handle.task_id
                else:
                    made.append(step.task_id)
            run = _record(run_id, plan, submitted_by, served)
            write_run(supervisor.workspace, run)
        except BaseException as exc:
            _remove(supervisor, made)
            if isinstance(exc, OSError) and is_space_error(exc):
                raise storage_error(exc, f"start a run of pipeline {plan.pipeline}") from exc
            raise
    return run


def _fresh_plan(supervisor: Supervisor, body: object, run_id: str | None) -> tuple[str, Plan]:
    """A run id whose steps' task ids name no existing task, and the checked plan."""
    workspace = supervisor.workspace
    for _ in range(RUN_ID_ATTEMPTS):
        chosen = run_id or new_run_id(pipeline_name(body))
        plan = make_plan(supervisor.registry, body, chosen.rsplit("-", 1)[-1])
        taken = [tid for tid in plan.ids().values() if workspace.task_dir(tid).exists()]
        if not taken:
            return chosen, plan
        if run_id is not None:
            raise InvalidPipeline(f"the steps of run {run_id} exist already ({taken[0]})")
    raise InvalidPipeline("no free run id was found; try again")


def pipeline_name(body: object) -> str:
    """The pipeline a request names (checked with the rest by the plan)."""
    return str(body.get("pipeline")) if isinstance(body, dict) else ""


def _record(
    run_id: str, plan: Plan, submitted_by: Submitter, served: dict[str, str]
) -> PipelineRun:
    steps = [
        StepRecord(s.key, s.task, served.get(s.task_id, s.task_id), list(s.depends_on))
        for s in plan.steps
    ]
    return PipelineRun(run_id, plan.pipeline, plan.params, utcnow(), steps, submitted_by)


def _remove(supervisor: Supervisor, made: list[str]) -> None:
    for task_id in reversed(made):  # dependents first: none is failed by its upstream
        try:
            supervisor.cancel(task_id)
            supervisor.delete([task_id])
        except Exception:
            log.exception("could not remove %s of a pipeline run that failed", task_id)


def cancel_run(supervisor: Supervisor, run: PipelineRun) -> list[str]:
    """Cancel the run's unfinished steps, dependents first; the ids this call cancelled."""
    cancelled = []
    for step in reversed(run.steps):
        status = supervisor.workspace.read_status(step.task_id)
        if status is not None and not status.terminal and supervisor.cancel(step.task_id):
            cancelled.append(step.task_id)
            fault_delay("pipeline.cancel")
    return cancelled


def run_view(workspace: Workspace, run: PipelineRun) -> dict[str, Any]:
    """The run as the API answers it: its record, each step's live state, the run's state."""
    steps = [_step_view(workspace, step) for step in run.steps]
    answer = run.to_json()
    answer.pop("submitted_by", None)
    answer["steps"] = steps
    answer["state"] = overall_state([step["state"] for step in steps])
    return answer


def _step_view(workspace: Workspace, step: StepRecord) -> dict[str, Any]:
    view: dict[str, Any] = {"key": step.key, "task": step.task, "task_id": step.task_id,
                            "depends_on": list(step.depends_on)}  # fmt: skip
    status = _status(workspace, step.task_id)
    if status is None:
        return {**view, "state": "missing"}
    view["state"] = status.state.value
    view.update({name: getattr(status, name, None) for name in STEP_FIELDS})
    return view


def _status(workspace: Workspace, task_id: str) -> TaskStatus | None:
    """The step's status as readers may take it (never one a sandboxed task forged), a
    running one whose worker is gone settled."""
    try:
        status = own_status(workspace, task_id, workspace.read_status(task_id))
    except (TaskNotFound, ValueError):
        return None
    if status is not None and status.state is TaskState.RUNNING:
        status = settle(workspace, status)
    return status


def overall_state(states: list[str]) -> str:
    """``running`` while a step is queued or running; then ``succeeded`` when all did,
    ``failed`` when one failed (or is gone), else ``cancelled``."""
    unfinished = {TaskState.QUEUED.value, TaskState.RUNNING.value}
    if any(state in unfinished for state in states):
        return "running"
    if all(state == TaskState.SUCCEEDED.value for state in states):
        return "succeeded"
    if any(state in (TaskState.FAILED.value, "missing") for state in states):
        return "failed"
    return "cancelled"
