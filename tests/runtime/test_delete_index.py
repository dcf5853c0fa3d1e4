"""Deleting tasks beside a running index, as a server does: a deleted task's logs are its
own log folder, ``<log_dir>/<type>/<task_id>/``, every run's log in it (the kept runs'
too), and never a file that a status names as its ``log_path`` elsewhere. A task can
rewrite its own status, so the statuses below are forged the way it would: the file
rewritten, pointing at another task's log, at the server's log through ``..`` from its
own log folder, or at a link it planted in its own log folder."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_helpers import wait_state

from runyard.repository import TaskRepository
from runyard.runtime.supervisor import Supervisor
from runyard.workspace.history import task_history_dir
from runyard.workspace.layout import STATUS_FILE
from runyard.workspace.records import TaskStatus


@pytest.fixture
def server(settings, workspace, registry) -> Iterator[tuple[Supervisor, TaskRepository]]:
    """A supervisor and an index wired as the server wires them."""
    repo = TaskRepository(workspace)
    repo.start()
    sup = Supervisor(settings, workspace, registry, on_change=repo.refresh)
    sup.known_tasks = repo
    sup.start()
    try:
        yield sup, repo
    finally:
        sup.stop()
        repo.stop()


def run_to_end(sup: Supervisor, workspace, name: str) -> TaskStatus:
    handle = sup.submit("demo", {"x": 1, "y": 2, "task_name": name})
    return wait_state(workspace, handle.task_id, "succeeded")


def forge_log_path(workspace, repo: TaskRepository, task_id: str, log_path: str) -> None:
    """Rewrite the task's own status.json as its worker could, then let the index read it."""
    path = workspace.task_dir(task_id) / STATUS_FILE
    data = json.loads(path.read_bytes())
    data["log_path"] = log_path
    path.write_text(json.dumps(data))
    status = repo.get(task_id)
    assert status is not None and status.log_path == log_path  # a valid status, indexed


def log_folder(workspace, task_id: str) -> Path:
    return workspace.log_dir / task_id.split("#")[0] / task_id


def test_a_deleted_task_takes_every_runs_log_and_no_log_its_status_names(server, workspace) -> None:
    sup, repo = server
    first = run_to_end(sup, workspace, "rerun")
    second = run_to_end(sup, workspace, "rerun")  # replaces the first, which is kept
    victim = run_to_end(sup, workspace, "victim")
    assert (task_history_dir(workspace, first.task_id) / first.run_id).is_dir()
    assert sorted(os.listdir(log_folder(workspace, first.task_id))) == sorted(
        [f"{first.run_id}.log", f"{second.run_id}.log"]
    )
    victim_log = Path(victim.log_path).read_bytes()
    assert b"Demo result=3" in victim_log
    forge_log_path(workspace, repo, second.task_id, victim.log_path)

    assert sup.delete([second.task_id]) == [second.task_id]

    assert not log_folder(workspace, second.task_id).exists()  # both runs' logs
    assert not task_history_dir(workspace, first.task_id).exists()
    assert Path(victim.log_path).read_bytes() == victim_log
    assert repo.get(second.task_id) is None
    assert [s.task_id for s in repo.list_statuses()[0]] == [victim.task_id]


def test_a_log_path_leading_out_of_the_tasks_log_folder_removes_nothing_there(
    server, workspace
) -> None:
    sup, repo = server
    server_log = workspace.log_dir / "server.log"
    server_log.write_text("the server's own log\n")
    dotted = run_to_end(sup, workspace, "dotted")
    linked = run_to_end(sup, workspace, "linked")
    own = log_folder(workspace, dotted.task_id)
    forge_log_path(workspace, repo, dotted.task_id, f"{own}/../../server.log")
    planted = log_folder(workspace, linked.task_id) / "planted.log"
    planted.symlink_to(server_log)
    forge_log_path(workspace, repo, linked.task_id, str(planted))

    assert sup.delete([dotted.task_id, linked.task_id]) == [dotted.task_id, linked.task_id]

    assert server_log.read_text() == "the server's own log\n"
    assert not own.exists() and not log_folder(workspace, linked.task_id).exists()
    assert sorted(os.listdir(workspace.log_dir)) == ["base", "server.log"]
    assert os.listdir(workspace.log_dir / "base") == []
