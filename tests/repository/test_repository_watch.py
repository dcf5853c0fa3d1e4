"""The index kept live by filesystem events, in both watch modes, and change callbacks."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from repo_helpers import Recorder, make_workspace, put_metadata, put_status, wait_for

from runyard.errors import InvalidInput
from runyard.repository import TaskRepository
from runyard.repository.records import TaskFolder
from runyard.repository.watcher import RECURSIVE_MAX_FOLDERS, choose_mode, watch_budget
from runyard.workspace import Workspace
from runyard.workspace.atomic import write_json_atomic
from runyard.workspace.events import append_event

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return make_workspace(tmp_path)


@pytest.fixture(params=["recursive", "sparse"])
def live(request: pytest.FixtureRequest, ws: Workspace) -> Iterator[TaskRepository]:
    put_status(ws, "base#demo#done", created=1)
    put_status(ws, "base#demo#busy", state="running", created=2)
    repo = TaskRepository(ws, watch_mode=request.param)
    repo.start()
    assert repo.watch_mode == request.param
    try:
        yield repo
    finally:
        repo.stop()


def state_of(repo: TaskRepository, task_id: str) -> str | None:
    status = repo.peek(task_id)
    return None if status is None else status.state.value


def test_a_new_task_appears_without_refresh(live: TaskRepository, ws: Workspace) -> None:
    calls = Recorder()
    live.subscribe(calls)
    put_status(ws, "etl#load#new", state="queued", created=3)
    wait_for(lambda: live.list_ids()[:1] == ["etl#load#new"])
    wait_for(lambda: calls.seen("etl#load#new", "status.json"))
    put_status(ws, "etl#load#new", state="running", created=3)
    wait_for(lambda: state_of(live, "etl#load#new") == "running")


def test_status_replaced_by_rename_is_seen(live: TaskRepository, ws: Workspace) -> None:
    calls = Recorder()
    live.subscribe(calls)
    for state in ["queued", "running", "failed"]:
        put_status(ws, "base#demo#busy", state=state, created=2)
        wait_for(lambda state=state: state_of(live, "base#demo#busy") == state)
    assert calls.seen("base#demo#busy", "status.json")
    assert live.list_statuses(state="failed")[0][0].task_id == "base#demo#busy"


def test_event_lines_reach_subscribers(live: TaskRepository, ws: Workspace) -> None:
    calls = Recorder()
    live.subscribe(calls)
    append_event(ws.events_path("base#demo#busy"), {"kind": "progress", "percentage": 10})
    wait_for(lambda: calls.seen("base#demo#busy", "events.jsonl"))


def test_metadata_publication_ends_provisional(live: TaskRepository, ws: Workspace) -> None:
    put_status(ws, "train#fit#child", state="running", created=3, sources="base#demo#done")
    wait_for(lambda: state_of(live, "train#fit#child") == "running")
    assert live.graph("train#fit#child").nodes[1].provisional
    put_metadata(ws, "train#fit#child", created=3, sources="base#demo#done")
    put_status(ws, "train#fit#child", state="succeeded", created=3, sources="base#demo#done")
    wait_for(lambda: [m.task_id for m in live.list_results()] == ["train#fit#child"])
    wait_for(lambda: not live.graph("train#fit#child").nodes[1].provisional)


def test_folder_removal_drops_the_task(live: TaskRepository, ws: Workspace) -> None:
    calls = Recorder()
    live.subscribe(calls)
    shutil.rmtree(ws.task_dir("base#demo#busy"))
    wait_for(lambda: calls.seen("base#demo#busy", ""))
    assert live.list_ids() == ["base#demo#done"]
    assert live.peek("base#demo#busy") is None


def test_a_folder_renamed_into_place_is_read(live: TaskRepository, ws: Workspace) -> None:
    staging = ws.type_dir("etl") / ".staging"
    staging.mkdir()
    status = put_status(ws, "etl#load#staged", state="queued", created=9)
    shutil.rmtree(ws.task_dir("etl#load#staged"))
    write_json_atomic(staging / "status.json", status.to_json(), fsync=False)
    os.rename(staging, ws.task_dir("etl#load#staged"))
    wait_for(lambda: state_of(live, "etl#load#staged") == "queued")


def test_a_replaced_folder_is_read_again(live: TaskRepository, ws: Workspace) -> None:
    shutil.rmtree(ws.task_dir("base#demo#done"))
    put_status(ws, "base#demo#done", state="queued", created=20)
    wait_for(lambda: state_of(live, "base#demo#done") == "queued")
    put_status(ws, "base#demo#done", state="running", created=20)
    wait_for(lambda: state_of(live, "base#demo#done") == "running")
    assert live.list_ids()[0] == "base#demo#done"


def test_a_broken_write_reads_as_missing_then_recovers(live: TaskRepository, ws: Workspace) -> None:
    ws.status_path("base#demo#busy").write_text("{half")
    wait_for(lambda: live.peek("base#demo#busy") is None)
    put_status(ws, "base#demo#busy", state="running", created=2)
    wait_for(lambda: state_of(live, "base#demo#busy") == "running")


def test_unsubscribe_and_failing_callbacks(live: TaskRepository, ws: Workspace) -> None:
    def explode(task_id: str, name: str) -> None:
        raise RuntimeError("subscriber bug")

    live.subscribe(explode)
    gone = Recorder()
    unsubscribe = live.subscribe(gone)
    unsubscribe()
    unsubscribe()
    kept = Recorder()
    live.subscribe(kept)
    append_event(ws.events_path("base#demo#busy"), {"kind": "progress"})
    wait_for(lambda: kept.seen("base#demo#busy", "events.jsonl"))
    assert gone.calls == []


def test_a_finished_task_rewritten_in_place_by_another_writer(ws: Workspace) -> None:
    put_status(ws, "base#demo#done", created=1)
    with TaskRepository(ws, watch_mode="recursive") as repo:
        put_status(ws, "base#demo#done", state="queued", created=5)
        wait_for(lambda: state_of(repo, "base#demo#done") == "queued")


def test_sparse_watches_a_task_again_once_refresh_reopens_it(ws: Workspace) -> None:
    put_status(ws, "base#demo#done", created=1)
    with TaskRepository(ws, watch_mode="sparse") as repo:
        put_status(ws, "base#demo#done", state="queued", created=5)
        repo.refresh("base#demo#done")
        put_status(ws, "base#demo#done", state="running", created=5)
        wait_for(lambda: state_of(repo, "base#demo#done") == "running")
        put_status(ws, "base#demo#done", state="failed", created=5)
        wait_for(lambda: state_of(repo, "base#demo#done") == "failed")


@pytest.mark.parametrize("mode", ["recursive", "sparse"])
def test_writes_during_start_are_not_lost(ws: Workspace, mode: str) -> None:
    for i in range(300):
        put_status(ws, f"base#demo#t{i}", created=i)
    stop = threading.Event()
    written: list[int] = []

    def keep_writing() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            put_status(ws, "base#demo#t0", state="running", created=0, error=str(n))
            written.append(n)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        repo = TaskRepository(ws, watch_mode=mode)
        repo.start()
    finally:
        stop.set()
        writer.join()
    try:
        last = str(written[-1])
        wait_for(lambda: (s := repo.peek("base#demo#t0")) is not None and s.error == last)
        assert len(repo.list_ids()) == 300
    finally:
        repo.stop()


def test_start_and_stop_are_idempotent(ws: Workspace) -> None:
    repo = TaskRepository(ws)
    repo.start()
    repo.start()
    assert repo.watch_mode == "recursive"
    repo.stop()
    repo.stop()
    assert repo.watch_mode == ""
    put_status(ws, "base#demo#later")
    repo.start(watch=False)
    assert repo.list_ids() == ["base#demo#later"] and repo.watch_mode == ""


def test_watch_mode_choice(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput):
        TaskRepository(make_workspace(tmp_path), watch_mode="polling")
    assert choose_mode("auto", 10) == "recursive"
    assert choose_mode("auto", RECURSIVE_MAX_FOLDERS + 1) == "sparse"
    assert choose_mode("auto", watch_budget()) == "sparse"
    assert choose_mode("sparse", 10) == "sparse"
    assert choose_mode("recursive", RECURSIVE_MAX_FOLDERS + 1) == "recursive"


def test_type_folders_are_created_so_they_can_be_watched(tmp_path: Path) -> None:
    ws = Workspace.open(tmp_path / "fresh", tmp_path / "logs")
    with TaskRepository(ws) as repo:
        put_status(ws, "inference#serve#x", state="queued")
        wait_for(lambda: repo.list_ids() == ["inference#serve#x"])


class ChangedDuringStart(TaskRepository):
    """A repository whose workspace changes after its scan and before its watches."""

    def __init__(self, ws: Workspace, mode: str, change: Callable[[], None]) -> None:
        super().__init__(ws, watch_mode=mode)
        self._change = change

    def _load(self, folders: list[TaskFolder]) -> None:
        super()._load(folders)
        self._change()


def age(ws: Workspace) -> None:
    """Make every folder look untouched for an hour: a workspace at rest."""
    old = time.time() - 3600
    for path in [ws.root, *ws.root.iterdir(), *ws.root.glob("*/*")]:
        os.utime(path, (old, old))


@pytest.mark.parametrize("mode", ["recursive", "sparse"])
def test_changes_between_the_scan_and_the_watches(ws: Workspace, mode: str) -> None:
    for name, state in [("replaced", "succeeded"), ("busy", "running"), ("gone", "failed")]:
        put_status(ws, f"base#demo#{name}", state=state, created=1)
    put_status(ws, "etl#load#finished", created=1)
    age(ws)

    def change() -> None:
        shutil.rmtree(ws.task_dir("base#demo#replaced"))
        put_status(ws, "base#demo#replaced", state="failed", created=9)
        put_status(ws, "base#demo#busy", state="succeeded", created=1)
        shutil.rmtree(ws.task_dir("base#demo#gone"))
        put_status(ws, "train#fit#new", state="queued", created=10)
        put_status(ws, "etl#load#finished", state="cancelled", created=1)

    repo = ChangedDuringStart(ws, mode, change)
    repo.start()
    try:
        assert state_of(repo, "base#demo#replaced") == "failed"
        assert state_of(repo, "base#demo#busy") == "succeeded"
        assert state_of(repo, "train#fit#new") == "queued"
        assert repo.peek("base#demo#gone") is None
        if mode == "recursive":  # a sparse watch does not follow finished tasks
            assert state_of(repo, "etl#load#finished") == "cancelled"
    finally:
        repo.stop()
