"""A submit puts its new task in the index from the status it wrote, not by reading the
folder back: the task is listed when the submit returns, the index keeps the very bytes
of its status file (so a status read of it needs no lock), and a fixed name's earlier
run leaves nothing of itself behind (its metadata goes with its folder)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from runyard.repository import TaskRepository
from runyard.repository.records import recent_status_json
from runyard.runtime.supervisor import Supervisor
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskMetadata, TaskState


@pytest.fixture
def indexed(
    make_supervisor: Callable[..., Supervisor], workspace: Workspace
) -> Iterator[tuple[Supervisor, TaskRepository]]:
    """A supervisor that launches nothing, beside an index with no watcher: what the index
    holds after a submit is what the submit put there."""
    repository = TaskRepository(workspace)
    repository.start(watch=False)
    supervisor = make_supervisor(start=False)
    supervisor.on_created = repository.take_created
    try:
        yield supervisor, repository
    finally:
        repository.stop()


def test_a_submitted_task_is_indexed_with_the_bytes_of_its_status_file(
    indexed: tuple[Supervisor, TaskRepository], workspace: Workspace
) -> None:
    supervisor, repository = indexed
    handle = supervisor.submit("demo", {"x": 1, "y": 2})
    status = repository.peek(handle.task_id)
    assert status is not None and status.run_id == handle.run_id
    assert status.state is TaskState.QUEUED
    assert [s.task_id for s in repository.list_statuses()[0]] == [handle.task_id]
    written = workspace.status_path(handle.task_id).read_bytes()
    assert recent_status_json(repository._index.statuses[handle.task_id]) == written

    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with repository._index.lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    try:  # the file holds what the index does: answered without the lock
        free, read = repository.get_unless_busy(handle.task_id)
    finally:
        release.set()
        holder.join(10)
    assert free and read is not None and read.run_id == handle.run_id


def test_a_fixed_name_submitted_again_leaves_nothing_of_the_earlier_run_in_the_index(
    indexed: tuple[Supervisor, TaskRepository], workspace: Workspace
) -> None:
    supervisor, repository = indexed
    first = supervisor.submit("demo", {"x": 1, "y": 2, "task_name": "fixed"})
    queued = workspace.read_status(first.task_id)
    assert queued is not None
    done = queued.model_copy(update={"state": TaskState.SUCCEEDED, "exit_code": 0})
    workspace.write_metadata(
        TaskMetadata(task_id=first.task_id, reg_name="demo", created_at=queued.created_at,
                     task_type=queued.task_type, input_params=queued.config,
                     output_params={"result": 3})
    )  # fmt: skip
    workspace.write_status(done, durable=True)
    repository.refresh(first.task_id)
    assert repository.get_metadata(first.task_id) is not None

    second = supervisor.submit("demo", {"x": 5, "y": 6, "task_name": "fixed"})
    assert second.task_id == first.task_id and second.run_id != first.run_id
    status = repository.peek(second.task_id)
    assert status is not None and status.run_id == second.run_id
    assert status.state is TaskState.QUEUED
    assert repository._index.metadata.get(second.task_id) is None
    assert not workspace.metadata_path(second.task_id).exists()
