"""Runs MLflow's client opens: runyard tasks the server records, with no worker.

``runs/create`` in experiment ``x`` makes the task ``base#x#<run name>`` (the name MLflow's
client gives, or a generated readable one), ``running`` from the start and marked
``tracked: {"by": "mlflow", ...}`` in its status, so no liveness check takes it for a lost
worker (:func:`runyard.runtime.liveness.settle`), across server restarts too. Its folder
is built in the workspace's staging area and renamed into place whole, as a submit's is
(:mod:`runyard.runtime.creation`); a run name already taken by a finished task replaces it
(the earlier run is kept in the task's history), one taken by a running task is refused.

What the client logs goes where a worker puts it: points appended to ``metrics.jsonl``,
params to ``params.json`` (written whole, atomically), and both summarised in the
status (``metrics``, ``params``); tags go in ``status.tracked["tags"]``. ``runs/update``
with ``FINISHED``, ``FAILED`` or ``KILLED`` ends it (succeeded, failed, cancelled);
``RUNNING`` opens an ended run again, as MLflow's ``start_run(run_id=...)`` does. Every
change to a run happens under its task's claim, so two requests never interleave.

Only these runs take writes: a run runyard ran is recorded by its worker, and an earlier
(kept) run is history; both are read-only to MLflow's client.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from runyard.api.mlflow.errors import EXISTS, INVALID, INVALID_STATE, NOT_FOUND, MlflowRefusal
from runyard.api.mlflow.experiments import Experiment
from runyard.api.mlflow.lookup import RunRef, find_run, remember_run
from runyard.api.services import Services
from runyard.errors import TaskActive
from runyard.runtime.creation import claim, clear_for_reuse, staging_path
from runyard.runtime.liveness import state_event
from runyard.runtime.submitters import ADMIN, record_submitter
from runyard.tracking.points import (
    METRICS_FILE,
    PARAMS_FILE,
    Point,
    check_metric_name,
    parse_point,
    point_json,
    wire_value,
)
from runyard.tracking.reading import read_params
from runyard.workspace.atomic import (
    dump_json,
    fsync_dir,
    write_bytes_atomic,
    write_bytes_new,
    write_json_atomic,
)
from runyard.workspace.events import append_event
from runyard.workspace.identity import TASK_NAME_RE, build_task_id
from runyard.workspace.layout import EVENTS_FILE, STATUS_FILE
from runyard.workspace.names import readable_name
from runyard.workspace.records import CANCEL_EXIT_CODE, TaskState, TaskStatus, utcnow
from runyard.workspace.safefs import DIR_FLAGS

TRACKED_BY = "mlflow"
TASK_TYPE = "base"
NAME_ATTEMPTS = 64
MAX_TAGS = 200
MAX_KEY_CHARS = 250
MAX_TAG_CHARS = 8000
MAX_PARAM_CHARS = 6000
LOCK_FLAGS = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
END_STATES = {
    "FINISHED": (TaskState.SUCCEEDED, 0, ""),
    "FAILED": (TaskState.FAILED, 1, "MLflow's client ended the run as FAILED"),
    "KILLED": (TaskState.CANCELLED, CANCEL_EXIT_CODE, "Cancelled"),
}


def check_tag(key: object, value: object) -> tuple[str, str]:
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_CHARS:
        raise MlflowRefusal(INVALID, f"A tag key must be 1-{MAX_KEY_CHARS} characters")
    if not isinstance(value, str) or len(value) > MAX_TAG_CHARS:
        raise MlflowRefusal(INVALID, f"Tag {key!r}: a value is text of at most "
                            f"{MAX_TAG_CHARS} characters")  # fmt: skip
    return key, value


def check_param(key: object, value: object) -> tuple[str, str]:
    name = check_metric_name(key)
    if not isinstance(value, str) or len(value) > MAX_PARAM_CHARS:
        raise MlflowRefusal(INVALID, f"Param {name!r}: a value is text of at most "
                            f"{MAX_PARAM_CHARS} characters")  # fmt: skip
    return name, value


def metric_point(metric: object) -> Point:
    """MLflow's ``Metric`` (key, value, timestamp in ms, step) as a point."""
    if not isinstance(metric, dict):
        raise MlflowRefusal(INVALID, "A metric must be an object with key, value, timestamp")
    stamp = metric.get("timestamp", time.time() * 1000)
    step = metric.get("step", 0)
    if isinstance(step, str) and step.lstrip("-").isdigit():  # int64 may come as text
        step = int(step)
    if isinstance(stamp, str) and stamp.isdigit():
        stamp = int(stamp)
    if isinstance(stamp, bool) or not isinstance(stamp, int | float) or abs(stamp) >= 2**63:
        raise MlflowRefusal(INVALID, "A metric's timestamp must be epoch milliseconds")
    wire = {"name": metric.get("key"), "value": metric.get("value"), "step": step,
            "time": stamp / 1000}  # fmt: skip
    return parse_point(wire)


# --- creating --------------------------------------------------------------------------


def create_run(
    services: Services,
    experiment: Experiment,
    name: str | None,
    tags: dict[str, str],
    user_id: str,
) -> RunRef:
    """A new running task for ``experiment`` (see the module docstring)."""
    if experiment.task in services.registry.names():
        raise MlflowRefusal(
            INVALID, f"Experiment {experiment.name!r} is runyard's task {experiment.task!r}: "
            "its runs are made by running that task. Log MLflow runs to an experiment of "
            "their own (mlflow.set_experiment)",
        )  # fmt: skip
    if name is not None and not TASK_NAME_RE.fullmatch(name):
        raise MlflowRefusal(
            INVALID, f"Invalid run name {name[:80]!r}: a run is a runyard task, whose name "
            "is 1-32 letters, digits or '-'",
        )  # fmt: skip
    tracked = {"by": TRACKED_BY, "tags": tags, "user_id": user_id}
    for attempt in range(1 if name is not None else NAME_ATTEMPTS):
        task_id = build_task_id(TASK_TYPE, experiment.task, name or readable_name("", attempt))
        with claim(services.workspace, task_id):
            if name is None and os.path.lexists(services.workspace.task_dir(task_id)):
                continue
            if name is not None:
                _clear_name(services, task_id)
            status = _place_running(services, task_id, tracked)
        services.repository.refresh(task_id)
        remember_run(services, status.run_id, task_id)
        return RunRef(status, services.workspace.task_dir(task_id), True)
    raise MlflowRefusal(EXISTS, "No free generated run name: give the run a name")


def _clear_name(services: Services, task_id: str) -> None:
    """Make room for a named run: a finished task of that name is kept as history."""
    current = services.workspace.read_status(task_id)
    if current is not None and current.tracked is None:
        raise MlflowRefusal(EXISTS, f"Run name taken: {task_id} is a task runyard ran")
    try:
        clear_for_reuse(services.workspace, task_id)
    except TaskActive as exc:
        raise MlflowRefusal(EXISTS, f"Run name taken: {task_id} is still running") from exc


def _place_running(services: Services, task_id: str, tracked: dict[str, Any]) -> TaskStatus:
    workspace = services.workspace
    now = utcnow()
    status = TaskStatus(
        task_id=task_id, run_id=uuid.uuid4().hex, task_type=TASK_TYPE,
        task_name=task_id.split("#")[1], state=TaskState.RUNNING,
        config={"task_name": task_id.rsplit("#", 1)[1]}, created_at=now, started_at=now,
        submitted_by=ADMIN, tracked=tracked, retry_of=None,
    )  # fmt: skip
    record_submitter(workspace, task_id, status.run_id, ADMIN)
    staging = staging_path(workspace, task_id)
    staging.mkdir()
    try:
        append_event(staging / EVENTS_FILE, state_event(TaskState.RUNNING, now))
        write_bytes_new(staging / STATUS_FILE, dump_json(status.to_json()))
        fsync_dir(staging)
        try:
            os.rename(staging, workspace.task_dir(task_id))
        except FileNotFoundError:  # no type folder yet
            workspace.task_dir(task_id).parent.mkdir(parents=True, exist_ok=True)
            os.rename(staging, workspace.task_dir(task_id))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(workspace.task_dir(task_id).parent)
    return status


# --- logging ---------------------------------------------------------------------------


def log_batch(
    services: Services,
    run_id: object,
    points: list[Point],
    params: dict[str, str],
    tags: dict[str, str],
) -> None:
    """Record what MLflow's client logged to run ``run_id`` (already validated)."""
    ref = find_run(services, run_id)
    status_path = services.workspace.status_path(ref.task_id)
    with locked(services, ref.task_id):
        status = writable_run(services, ref)
        update: dict[str, Any] = {}
        if points:
            _append_points(ref, points)
            update["metrics"] = _summaries(status, points)
        if params:
            update["params"] = _merged_params(ref, params)
        if tags:
            update["tracked"] = _with_tags(status, tags)
        if update:  # derivable from the files: a crash that loses it loses no point
            write_json_atomic(status_path, _updated(status, update).to_json(), fsync=False)
    services.repository.refresh(ref.task_id)


@contextlib.contextmanager
def locked(services: Services, task_id: str) -> Iterator[None]:
    """Hold the task's claim (other requests of MLflow's client, a rerun of the name) and
    its worker lock, which whoever records a run's end from outside takes (runyard's
    cancel, :func:`runyard.runtime.liveness.end_dead_run`): no write of ours lands on an
    end recorded meanwhile."""
    with claim(services.workspace, task_id):
        try:
            fd = os.open(services.workspace.lock_path(task_id), LOCK_FLAGS, 0o644)
        except FileNotFoundError as exc:
            raise MlflowRefusal(NOT_FOUND, f"The task of this run, {task_id}, is gone") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def writable_run(services: Services, ref: RunRef) -> TaskStatus:
    """The current status of ``ref``'s run if MLflow's client may write it."""
    current = services.workspace.read_status(ref.task_id)
    if current is None or current.run_id != ref.run_id:
        raise MlflowRefusal(
            INVALID_STATE,
            f"Run {ref.run_id} is an earlier run of "
            f"{ref.task_id}, kept as history: it takes no more writes",
        )
    if current.tracked is None:
        raise MlflowRefusal(
            INVALID_STATE,
            f"Run {ref.run_id} is {ref.task_id}, a task runyard "
            "ran: its worker records it, MLflow's client may only read it",
        )
    return current


def _updated(status: TaskStatus, update: dict[str, Any]) -> TaskStatus:
    data = status.to_json()
    data.update(update)
    return TaskStatus.model_validate(data)


def _append_points(ref: RunRef, points: list[Point]) -> None:
    data = b"".join(dump_json(point_json(p)) + b"\n" for p in points)
    folder = os.open(ref.folder, DIR_FLAGS)
    try:
        fd = os.open(METRICS_FILE, APPEND_FLAGS, 0o644, dir_fd=folder)
    finally:
        os.close(folder)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _summaries(status: TaskStatus, points: list[Point]) -> dict[str, Any]:
    """The status's metric summaries with ``points`` folded in (file order)."""
    known = getattr(status, "metrics", None)
    summaries = {k: dict(v) for k, v in known.items()} if isinstance(known, dict) else {}
    for point in points:
        summary = summaries.setdefault(
            point.name, {"last": None, "min": None, "max": None, "step": 0, "count": 0}
        )
        summary["last"], summary["step"] = wire_value(point.value), point.step
        summary["count"] = int(summary.get("count") or 0) + 1
        if not math.isnan(point.value):
            low, high = _number(summary.get("min")), _number(summary.get("max"))
            if low is None or point.value < low:
                summary["min"] = wire_value(point.value)
            if high is None or point.value > high:
                summary["max"] = wire_value(point.value)
    return summaries


def _number(value: Any) -> float | None:
    if isinstance(value, str):
        return {"Infinity": math.inf, "-Infinity": -math.inf}.get(value)
    return float(value) if isinstance(value, int | float) else None


def _merged_params(ref: RunRef, params: dict[str, str]) -> dict[str, Any]:
    """The logged params with ``params`` added; a changed value is refused, as MLflow does."""
    logged = read_params(ref.folder)
    for name, value in params.items():
        if name in logged and logged[name] != value:
            raise MlflowRefusal(
                INVALID, f"Changing param values is not allowed: param {name!r} was logged "
                f"as {str(logged[name])[:100]!r}, now {value[:100]!r}",
            )  # fmt: skip
    merged = {**logged, **params}
    write_bytes_atomic(ref.folder / PARAMS_FILE, dump_json(merged))
    return merged


def _with_tags(status: TaskStatus, tags: dict[str, str]) -> dict[str, Any]:
    tracked = dict(status.tracked or {})
    kept = tracked.get("tags")
    merged = {**(kept if isinstance(kept, dict) else {}), **tags}
    if len(merged) > MAX_TAGS:
        raise MlflowRefusal(INVALID, f"A run keeps at most {MAX_TAGS} tags")
    tracked["tags"] = merged
    return tracked


def delete_tag(services: Services, run_id: object, key: str) -> None:
    ref = find_run(services, run_id)
    with locked(services, ref.task_id):
        status = writable_run(services, ref)
        tracked = dict(status.tracked or {})
        tags = dict(tracked.get("tags") or {})
        if tags.pop(key, None) is None:
            raise MlflowRefusal(NOT_FOUND, f"No tag {key!r} on run {run_id}")
        tracked["tags"] = tags
        services.workspace.write_status(_updated(status, {"tracked": tracked}))
    services.repository.refresh(ref.task_id)


# --- ending ----------------------------------------------------------------------------


def update_run(
    services: Services, run_id: object, mlflow_status: object, end_time: object
) -> RunRef:
    """End run ``run_id`` (FINISHED, FAILED, KILLED) or open it again (RUNNING)."""
    ref = find_run(services, run_id)
    if mlflow_status is None:
        return ref
    if mlflow_status != "RUNNING" and mlflow_status not in END_STATES:
        raise MlflowRefusal(INVALID, f"Unknown run status {str(mlflow_status)[:40]!r}: one of "
                            "RUNNING, FINISHED, FAILED, KILLED")  # fmt: skip
    with locked(services, ref.task_id):
        status = writable_run(services, ref)
        final = _ended(status, str(mlflow_status), end_time)
        if final.state is not status.state:
            append_event(
                services.workspace.events_path(ref.task_id),
                state_event(final.state, final.finished_at or utcnow()),
            )
        services.workspace.write_status(final, durable=final.terminal)
    services.repository.refresh(ref.task_id)
    return RunRef(final, ref.folder, True)


def _ended(status: TaskStatus, mlflow_status: str, end_time: object) -> TaskStatus:
    if mlflow_status == "RUNNING":
        return _updated(status, {"state": TaskState.RUNNING.value, "finished_at": None,
                                 "exit_code": 0, "error": ""})  # fmt: skip
    state, code, error = END_STATES[mlflow_status]
    return _updated(status, {"state": state.value, "finished_at": _stamp(end_time),
                             "exit_code": code, "error": error})  # fmt: skip


def _stamp(end_time: object) -> str:
    """MLflow's end time (epoch ms) as runyard writes times; now when none is given."""
    if isinstance(end_time, str) and end_time.isdigit():
        end_time = int(end_time)
    if isinstance(end_time, bool) or not isinstance(end_time, int | float) or end_time <= 0:
        return utcnow()
    try:
        return datetime.fromtimestamp(end_time / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    except (OverflowError, OSError, ValueError):
        return utcnow()
