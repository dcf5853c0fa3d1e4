"""Liveness by lock (not by PID), settle, wait_for_run."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time

import pytest
from runtime_helpers import held_elsewhere

from runyard.errors import RunMismatch, TaskNotFound
from runyard.executors.pidwatch import open_pidfd, process_start_time
from runyard.runtime.creation import create_task
from runyard.runtime.liveness import (
    end_dead_run,
    settle,
    supervision_path,
    wait_for_run,
    worker_alive,
)
from runyard.runtime.workerlock import (
    SUPERVISED_FILE,
    SUPERVISION_WAIT,
    acquire_worker_lock,
    hold_supervision,
    read_owner,
    supervised,
)
from runyard.workspace.records import TaskState


def test_a_recorded_live_pid_without_the_lock_is_not_alive(workspace, registry):
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
    lock = workspace.lock_path(status.task_id)
    # PID reuse: the file names a live process (this one), but nobody holds the lock.
    lock.write_text(f"{os.getpid()} {process_start_time(os.getpid())} {status.run_id}\n")
    running = status.model_copy(update={"state": TaskState.RUNNING, "pid": os.getpid()})
    workspace.write_status(running)

    assert not worker_alive(workspace, status.task_id)
    settled = settle(workspace, running)
    assert settled.state == "failed" and "exit status unknown" in settled.error
    assert settled.exit_code == 1


def test_the_lock_holder_is_alive_and_recorded(workspace, registry):
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
    fd = acquire_worker_lock(workspace.lock_path(status.task_id), status.run_id)
    try:
        assert worker_alive(workspace, status.task_id)
        owner = read_owner(workspace.lock_path(status.task_id))
        assert owner.pid == os.getpid() and owner.run_id == status.run_id
        running = status.model_copy(update={"state": TaskState.RUNNING})
        workspace.write_status(running)
        assert settle(workspace, running) is running
    finally:
        os.close(fd)
    assert not worker_alive(workspace, status.task_id)


def test_a_wrong_start_time_refuses_the_pidfd():
    start = process_start_time(os.getpid())
    assert start is not None
    fd = open_pidfd(os.getpid(), start)
    assert fd is not None
    os.close(fd)
    assert open_pidfd(os.getpid(), start + 1) is None


def test_the_end_of_a_run_already_final_takes_no_lock_and_writes_nothing(workspace, registry):
    """The usual end: the worker wrote its final status. The exit's record is then read,
    not rewritten, and the worker's lock is neither taken nor made."""
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
    done = status.model_copy(update={"state": TaskState.SUCCEEDED, "exit_code": 0})
    workspace.write_status(done)
    before = workspace.status_path(status.task_id).stat()
    lock = workspace.lock_path(status.task_id)
    assert not lock.exists()
    ended = end_dead_run(workspace, status.task_id, status.run_id)
    assert ended is not None and ended.state is TaskState.SUCCEEDED and ended.exit_code == 0
    assert not lock.exists()  # not opened (with O_CREAT) to be taken
    after = workspace.status_path(status.task_id).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)

    # an unfinished run whose worker is gone: taken under the lock and recorded failed
    again = create_task(workspace, registry, "demo", {"x": 2, "y": 2})
    workspace.write_status(again.model_copy(update={"state": TaskState.RUNNING}))
    failed = end_dead_run(workspace, again.task_id, again.run_id)
    assert failed is not None and failed.state is TaskState.FAILED
    assert workspace.lock_path(again.task_id).exists()
    assert workspace.read_status(again.task_id) == failed


def test_settle_leaves_queued_and_final_statuses_alone(workspace, registry):
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
    assert settle(workspace, status) is status
    done = status.model_copy(update={"state": TaskState.SUCCEEDED})
    assert settle(workspace, done) is done


def test_wait_for_run_errors_and_timeout(workspace, registry):
    with pytest.raises(TaskNotFound):
        wait_for_run(workspace, "base#demo#nothing", "0" * 32, timeout=1)
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
    with pytest.raises(RunMismatch) as info:
        wait_for_run(workspace, status.task_id, "0" * 32, timeout=1)
    assert info.value.current == status.run_id

    started = time.monotonic()
    still = wait_for_run(workspace, status.task_id, status.run_id, poll_interval=0.05, timeout=0.3)
    assert still.state == "queued" and 0.3 <= time.monotonic() - started < 2


def _dead_running(workspace, registry):
    """A running status whose worker is gone (nobody holds its lock)."""
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
    running = status.model_copy(update={"state": TaskState.RUNNING, "pid": 2**22 + 1})
    workspace.write_status(running)
    assert not worker_alive(workspace, status.task_id)
    return running


def test_a_supervised_run_is_left_to_its_supervisor_which_makes_no_file(workspace, registry):
    """The supervisor (another process: a server watching the run) will record the exact
    exit, so a reader settles nothing while it holds the run. Its hold is a lock on the task
    folder itself: it creates no file there (each would cost the run an inode)."""
    running = _dead_running(workspace, registry)
    folder = workspace.task_dir(running.task_id)
    assert supervision_path(workspace, running.task_id) == folder
    names = sorted(os.listdir(folder))
    with held_elsewhere(folder, "supervise"):
        assert settle(workspace, running) == running
        assert workspace.read_status(running.task_id).state is TaskState.RUNNING
        assert sorted(os.listdir(folder)) == names
    settled = settle(workspace, running)  # nobody watches it now: the reader records it
    assert settled.state is TaskState.FAILED and "exit status unknown" in settled.error


def test_the_supervision_file_of_earlier_versions_is_still_honoured(workspace, registry):
    running = _dead_running(workspace, registry)
    legacy = workspace.task_dir(running.task_id) / SUPERVISED_FILE
    legacy.touch()
    with held_elsewhere(legacy, "shared"):  # as earlier versions held it
        assert settle(workspace, running) == running
    assert settle(workspace, running).state is TaskState.FAILED


def test_where_a_folder_cannot_be_locked_the_supervision_file_is_held(
    workspace, registry, monkeypatch
):
    """NFS emulates ``flock`` with byte-range locks, which need an open file, so a folder
    there cannot be locked: the supervisor holds the ``.supervised`` file instead, and a
    reader asks both without failing."""
    real = fcntl.flock

    def no_folder_locks(fd: int, operation: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.ENOLCK, "No locks available")
        real(fd, operation)

    monkeypatch.setattr(fcntl, "flock", no_folder_locks)
    running = _dead_running(workspace, registry)
    folder = workspace.task_dir(running.task_id)
    fd = hold_supervision(folder)
    assert fd is not None
    try:
        assert (folder / SUPERVISED_FILE).exists()
        assert supervised(folder)
        assert settle(workspace, running) == running
    finally:
        os.close(fd)
    assert not supervised(folder)
    assert settle(workspace, running).state is TaskState.FAILED


def test_a_folder_someone_else_locks_is_not_waited_for_long(workspace, registry):
    """An exclusive lock on the task folder, taken by anyone who may open it, gets no
    supervisor stuck: the hold gives up after SUPERVISION_WAIT seconds (None), and is had
    again once that lock is gone."""
    running = _dead_running(workspace, registry)
    folder = workspace.task_dir(running.task_id)
    with held_elsewhere(folder, "exclusive"):
        started = time.monotonic()
        assert hold_supervision(folder) is None
        assert SUPERVISION_WAIT <= time.monotonic() - started < SUPERVISION_WAIT + 5
    fd = hold_supervision(folder)
    assert fd is not None
    os.close(fd)
