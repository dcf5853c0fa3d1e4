"""The worker: runs ONE task run in its own process and writes its records.

Started as ``python -m runyard.runtime.worker`` (or forked by the pre-forked launcher)
with a JSON payload on stdin — never on argv::

    {"workspace": "/ws", "log_dir": "/logs", "task_id": "base#demo#x",
     "run_id": "…", "target": "runyard.tasks.builtin.demo:Demo"}

The inputs are the ``config`` of the ``queued`` status it finds; it starts only if that
status is the payload's run. Publish order on success: ``metadata.json`` durably, then the
``succeeded`` status. Exit codes: 0 succeeded; 1 failed (or the task's ``TaskExit`` code);
130 cancelled (SIGTERM); 75 refused to start (lock busy, run or state not as expected).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runyard.runtime.liveness import cancel_requested
from runyard.runtime.proctitle import task_title
from runyard.runtime.recordsink import records_for
from runyard.runtime.taskrun import (
    CancelSignal,
    TaskCancelled,
    WorkerRun,
    flush_stdio,
    result_of,
)
from runyard.runtime.workerlock import acquire_worker_lock
from runyard.tasks.base import Task, TaskExit, TaskOutput
from runyard.tasks.registry import import_target, validate_inputs
from runyard.workspace.layout import Workspace
from runyard.workspace.records import CANCEL_EXIT_CODE, TaskMetadata, TaskState, utcnow

EXIT_REFUSED = 75
# set where the worker can be stopped without being cancelled (a Kubernetes pod past its
# deadline, evicted or drained): a SIGTERM is a cancel only when one was requested for it
CANCEL_NEEDS_REQUEST = "RUNYARD_CANCEL_NEEDS_REQUEST"
STOPPED_EXIT_CODE = 128 + 15  # as a shell reports a SIGTERM
STOPPED_UNASKED = (
    "Stopped by SIGTERM with no cancel requested: the pod was stopped from outside "
    "(its deadline, an eviction or a node drain)"
)


@dataclass(frozen=True)
class WorkerPayload:
    workspace: str
    log_dir: str
    task_id: str
    run_id: str
    target: str

    @classmethod
    def parse(cls, raw: bytes) -> WorkerPayload:
        data = json.loads(raw)
        return cls(**{name: str(data[name]) for name in cls.__dataclass_fields__})

    def dump(self) -> bytes:
        return json.dumps(self.__dict__).encode()


def main() -> int:
    """Entry point; returns the exit code (the pre-forked launcher calls this directly)."""
    cancel = CancelSignal()
    cancel.install()
    _line_buffered_stdout()
    try:
        payload = WorkerPayload.parse(sys.stdin.buffer.read())
    except (ValueError, KeyError, TypeError) as exc:
        print(f"runyard worker: bad payload on stdin: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    code = run_payload(payload, cancel)
    flush_stdio()
    return code


def run_payload(payload: WorkerPayload, cancel: CancelSignal, *, release: bool = False) -> int:
    """Run the payload's task; the exit code. The worker's lock is held until this process
    ends (a worker's whole life), or only until the run ends with ``release``."""
    workspace = Workspace(Path(payload.workspace), Path(payload.log_dir))
    lock_fd = acquire_worker_lock(workspace.lock_path(payload.task_id), payload.run_id)
    if lock_fd is None:
        return _refuse(payload, "another worker holds the task's lock")
    try:
        return _run_locked(workspace, payload, cancel)
    finally:
        if release:
            os.close(lock_fd)


def _run_locked(workspace: Workspace, payload: WorkerPayload, cancel: CancelSignal) -> int:
    status = workspace.read_status(payload.task_id)
    if status is None or status.run_id != payload.run_id:
        return _refuse(payload, "the task folder holds another run")
    if status.state is not TaskState.QUEUED:
        return _refuse(payload, f"the run is already {status.state.value}")
    task_title(status.task_type, status.task_id)  # ps names the worker by its task
    run = WorkerRun(workspace, status, cancel, records_for(workspace, payload.task_id))
    try:
        task_cls = import_target(payload.target)
    except Exception as exc:  # a plugin that no longer imports fails its run, clearly
        traceback.print_exc()
        return _finish_failed(run, f"{type(exc).__name__}: {exc}", 1)
    if cancel.requested:
        return _finish_cancelled(run)
    run.begin(os.getpid(), task_cls.steps)
    return _execute(run, task_cls, cancel)


def _refuse(payload: WorkerPayload, why: str) -> int:
    print(f"runyard worker: not starting {payload.task_id} run {payload.run_id}: {why}",
          file=sys.stderr)
    return EXIT_REFUSED


def _execute(run: WorkerRun, task_cls: type[Task], cancel: CancelSignal) -> int:
    try:
        with cancel.armed():
            output = _run_body(run, task_cls)
        if cancel.requested:
            raise TaskCancelled
    except TaskCancelled:
        return _finish_cancelled(run)
    except BaseException as exc:  # the task's failure is the run's result, whatever it is
        traceback.print_exc()
        if cancel.requested:  # e.g. its child process got the group's SIGTERM first
            return _finish_cancelled(run)
        return _finish_failed(run, f"{type(exc).__name__}: {exc}", _failure_code(exc))
    return _publish_success(run, output)


def _run_body(run: WorkerRun, task_cls: type[Task]) -> TaskOutput:
    inputs = validate_inputs(task_cls, run.status.task_name, run.status.config)
    output = task_cls().run(inputs, run)
    if isinstance(output, dict):
        output = task_cls.Output.model_validate(output)
    if not isinstance(output, task_cls.Output):
        raise TypeError(f"run() returned {type(output).__name__}, not {task_cls.Output.__name__}")
    return output


def _failure_code(exc: BaseException) -> int:
    """The run's exit code: the task's own (a signal -N as 128+N, as shells do), else 1."""
    code = 1
    if isinstance(exc, TaskExit):
        code = exc.exit_code
    elif isinstance(exc, SystemExit) and isinstance(exc.code, int):
        code = exc.code
    if code < 0:
        return 128 - code
    return code or 1


def _publish_success(run: WorkerRun, output: TaskOutput) -> int:
    result = result_of(output, run.artifacts)
    status = run.status
    metadata = TaskMetadata(
        task_id=status.task_id, reg_name=status.task_name, created_at=status.created_at,
        task_type=status.task_type, input_params=status.config, output_params=result,
        cache_key=status.cache_key,
    )
    run.records.write_metadata(metadata)
    _finish(run, TaskState.SUCCEEDED, 0, "", result)
    return 0


def _finish_failed(run: WorkerRun, error: str, code: int) -> int:
    _finish(run, TaskState.FAILED, code, error, {})
    return code


def _finish_cancelled(run: WorkerRun) -> int:
    if os.environ.get(CANCEL_NEEDS_REQUEST) == "1" and not cancel_requested(
        run.workspace, run.task_id, run.run_id
    ):
        print("runyard worker: stopped with no cancel requested", file=sys.stderr)
        _finish(run, TaskState.FAILED, STOPPED_EXIT_CODE, STOPPED_UNASKED, {})
        return STOPPED_EXIT_CODE
    print("runyard worker: cancelled", file=sys.stderr)
    _finish(run, TaskState.CANCELLED, CANCEL_EXIT_CODE, "Cancelled", {})
    return CANCEL_EXIT_CODE


def _finish(
    run: WorkerRun, state: TaskState, code: int, error: str, result: dict[str, Any]
) -> None:
    flush_stdio()
    run.status = run.status.model_copy(
        update={"state": state, "finished_at": utcnow(), "exit_code": code, "error": error,
                "result": result}
    )
    run.publish_state(durable=True)


def _line_buffered_stdout() -> None:
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(line_buffering=True)


if __name__ == "__main__":
    sys.exit(main())
