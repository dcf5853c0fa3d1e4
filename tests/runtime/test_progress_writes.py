"""Progress reaches status.json at most once an interval; the journal keeps every change.

A task reporting progress in a tight loop must not turn each call into a new file renamed
over status.json, yet what it reported must show in the status soon after, and nothing
held back may land after the run's final status.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from runtime_helpers import RenameRecorder, wait_until

from runyard.executors.local import LocalExecutor
from runyard.runtime import taskrun
from runyard.runtime.creation import create_task
from runyard.runtime.launch import worker_spec
from runyard.runtime.liveness import wait_for_run
from runyard.runtime.taskrun import PROGRESS_WRITE_INTERVAL, CancelSignal, WorkerRun
from runyard.workspace.events import read_events
from runyard.workspace.records import TaskState, utcnow

REPORTS = 200


@pytest.fixture(autouse=True)
def _unfinished_runs_closed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The runs these tests begin in this process and leave unfinished end their metrics
    (its intake thread, and the $RUNYARD_METRICS_FILE a run names to its processes) as a
    worker's end would: later tests' subprocesses must not inherit a finished test's file."""
    begun: list[WorkerRun] = []
    begin = WorkerRun.begin

    def recorded(run: WorkerRun, pid: int, steps: tuple[str, ...]) -> None:
        begun.append(run)
        begin(run, pid, steps)

    monkeypatch.setattr(WorkerRun, "begin", recorded)
    yield
    for run in begun:
        if not run.status.terminal:
            run.metrics.close()


def progress_events(workspace, task_id: str, name: str = "work") -> list[float]:
    events = [event for _, event in read_events(workspace.events_path(task_id))[0]]
    return [e["percentage"] for e in events if e["kind"] == "progress" and e["name"] == name]


def step_percentage(workspace, task_id: str, name: str = "work") -> float | None:
    status = workspace.read_status(task_id)
    steps = {step.name: step.percentage for step in status.steps} if status else {}
    return steps.get(name)


def fork_running(body: Callable[[], int]) -> int:
    """A forked child of this process that exits with ``body()``; one that hangs is stopped
    by SIGALRM after 5 s. Its pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.alarm(5)
            code = body()
        finally:
            os._exit(code)
    return pid


def exit_code(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def status_writes(recorder: RenameRecorder) -> int:
    """How many status.json writes began: each creates a temporary file of a new name."""
    return sum(name.startswith(".status.json.") for name in recorder.read())


def test_a_burst_of_progress_is_written_a_few_times_and_journaled_whole(
    settings, workspace, registry, tmp_path
):
    hold = tmp_path / "release"
    status = create_task(workspace, registry, "burst", {"reports": REPORTS, "hold": str(hold)})
    recorder = RenameRecorder(workspace.task_dir(status.task_id), RenameRecorder.IN_CREATE)
    try:
        LocalExecutor().launch(
            worker_spec(settings, workspace, status, registry.get("burst").target)
        )
        # the worker holds after its burst: the last progress must reach the status meanwhile
        wait_until(lambda: step_percentage(workspace, status.task_id) == 100.0, 10)
        held = workspace.read_status(status.task_id)
        writes_in_burst = status_writes(recorder)
        hold.touch()
        final = wait_for_run(workspace, status.task_id, status.run_id, 0.05, timeout=30)
    finally:
        hold.touch()
        recorder.close()

    assert held.state is TaskState.RUNNING
    assert final.state is TaskState.SUCCEEDED
    # running, then one write an interval of the burst, and the held one at its end (one a
    # call would be 200 more)
    burst_seconds = final.result["seen"][0]
    most = 3 + int(burst_seconds / PROGRESS_WRITE_INTERVAL)
    assert 2 <= writes_in_burst <= most < REPORTS / 4, (writes_in_burst, burst_seconds)
    assert {step.name: step.percentage for step in final.steps} == {"work": 100.0}
    seen = progress_events(workspace, status.task_id)
    assert len(seen) == REPORTS and seen[-1] == 100.0
    assert seen == sorted(seen)


def test_progress_held_back_is_written_when_the_interval_ends(workspace, registry):
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
    run = WorkerRun(workspace, status, CancelSignal())
    recorder = RenameRecorder(workspace.task_dir(status.task_id), RenameRecorder.IN_CREATE)
    try:
        run.begin(os.getpid(), ("work",))
        started = time.monotonic()
        for value in range(1, 101):
            run.progress("work", value)
        wait_until(lambda: step_percentage(workspace, status.task_id) == 100.0, 5)
        took = time.monotonic() - started
        writes = status_writes(recorder)
    finally:
        recorder.close()

    assert took >= PROGRESS_WRITE_INTERVAL * 0.9  # it waited for the interval's end
    assert 2 <= writes <= 4, writes  # begin, perhaps a first report, the held ones
    assert len(progress_events(workspace, status.task_id)) == 100


def test_nothing_held_back_lands_after_the_final_status(workspace, registry):
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
    run = WorkerRun(workspace, status, CancelSignal())
    run.begin(os.getpid(), ("work",))
    for value in (10, 20, 30):
        run.progress("work", value)  # held: within the interval of begin's write
    run.status = run.status.model_copy(
        update={
            "state": TaskState.FAILED,
            "finished_at": utcnow(),
            "exit_code": 1,
            "error": "stopped",
        }
    )
    run.publish_state(durable=True)
    recorder = RenameRecorder(workspace.task_dir(status.task_id), RenameRecorder.IN_CREATE)
    try:
        run.progress("work", 40)  # a late report (from a thread of the task) is dropped
        time.sleep(PROGRESS_WRITE_INTERVAL * 4)
        late_writes = status_writes(recorder)
    finally:
        recorder.close()

    assert late_writes == 0  # the durable final status is the last write of the run
    final = workspace.read_status(status.task_id)
    assert final.state is TaskState.FAILED and final.exit_code == 1
    assert {step.name: step.percentage for step in final.steps} == {"work": 30.0}
    assert progress_events(workspace, status.task_id) == [10, 20, 30]


def test_held_progress_never_writes_an_end_before_it_is_journaled(workspace, registry):
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
    run = WorkerRun(workspace, status, CancelSignal())
    run.begin(os.getpid(), ("work",))
    run.progress("work", 50)  # held: the timer fires within the interval
    run.status = run.status.model_copy(  # the end is set, then published (as _finish does)
        update={"state": TaskState.SUCCEEDED, "finished_at": utcnow(), "exit_code": 0}
    )
    time.sleep(PROGRESS_WRITE_INTERVAL * 4)  # the timer fired meanwhile

    shown = workspace.read_status(status.task_id)
    assert shown.state is TaskState.RUNNING  # not an end the journal does not hold yet
    run.publish_state(durable=True)
    assert workspace.read_status(status.task_id).state is TaskState.SUCCEEDED
    states = [
        e["state"]
        for _, e in read_events(workspace.events_path(status.task_id))[0]
        if e["kind"] == "state"
    ]
    assert states == ["queued", "running", "succeeded"]


def test_a_held_write_that_fails_is_said_in_the_log_and_the_run_goes_on(
    workspace, registry, capsys
):
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
    run = WorkerRun(workspace, status, CancelSignal())
    run.begin(os.getpid(), ("work",))
    folder = workspace.task_dir(status.task_id)
    aside = folder.with_name(".aside")
    run.progress("work", 10)  # held; its write will find no folder
    folder.rename(aside)
    time.sleep(PROGRESS_WRITE_INTERVAL * 4)
    aside.rename(folder)
    err = capsys.readouterr().err
    assert "progress not written to status.json" in err and "Traceback" not in err, err

    time.sleep(PROGRESS_WRITE_INTERVAL)
    run.progress("work", 20)  # the interval is over: written at once, with the lost report
    assert step_percentage(workspace, status.task_id) == 20.0


def test_a_task_that_forks_while_the_timer_writes_reports_on_in_the_child(workspace, registry):
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
    run = WorkerRun(workspace, status, CancelSignal())
    run.begin(os.getpid(), ("work",))
    holding, release = threading.Event(), threading.Event()

    def write_held() -> None:  # as the timer thread holds the run's lock while it writes
        with run._lock:
            holding.set()
            release.wait(10)

    def report_in_child() -> int:
        run.progress("child", 50)
        return 0

    timer = threading.Thread(target=write_held)
    timer.start()
    try:
        assert holding.wait(5)
        code = exit_code(fork_running(report_in_child))  # as multiprocessing forks
    finally:
        release.set()
        timer.join(10)

    assert code == 0  # the child did not block on a lock held by a thread it does not have
    assert progress_events(workspace, status.task_id, "child") == [50.0]


def test_a_child_forked_while_a_write_is_held_writes_its_own_reports(
    workspace, registry, monkeypatch
):
    monkeypatch.setattr(taskrun, "PROGRESS_WRITE_INTERVAL", 0.5)
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
    run = WorkerRun(workspace, status, CancelSignal())
    run.begin(os.getpid(), ("work",))
    run.progress("work", 10)  # held: this process's timer waits for the interval's end

    def report_in_child() -> int:
        run.progress("child", 50)  # within the interval too: held, then written by the child
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            if step_percentage(workspace, status.task_id, "child") == 50.0:
                return 0
            time.sleep(0.02)
        return 3  # held for ever: the timer it waits for runs only in the parent

    child = fork_running(report_in_child)
    run.publish_state(durable=False)  # the parent's held write goes out now, not over the child's

    assert exit_code(child) == 0
    assert progress_events(workspace, status.task_id, "child") == [50.0]
    assert step_percentage(workspace, status.task_id) == 10.0


def test_a_held_write_runs_once_after_its_delay_and_a_cancelled_one_never():
    calls: list[taskrun.HeldWrite] = []
    fired = taskrun.HeldWrite(0.02, calls.append)
    dropped = taskrun.HeldWrite(0.02, calls.append)
    dropped.cancel()
    dropped.cancel()  # twice: still a no-op
    assert taskrun.join_held_writes(10)
    assert calls == [fired]


def test_join_held_writes_waits_for_every_timer_thread_and_says_when_one_lives_on():
    # judged by the timer's own thread, not the process's thread count, which other
    # tests' threads ending meanwhile would change
    held = taskrun.HeldWrite(60, lambda _: None)
    assert not taskrun.join_held_writes(0.05)  # it sleeps on: not joined
    assert not held.join(0.0) and held in taskrun._PENDING
    held.cancel()
    assert taskrun.join_held_writes(10)
    assert held.join(0.0) and held not in taskrun._PENDING
