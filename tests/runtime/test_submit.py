"""Submitting: input errors write nothing, names, fixed-name replacement, concurrent claims."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import watchfiles

from runyard.errors import InvalidInput, TaskActive, UnknownTask
from runyard.runtime import creation
from runyard.runtime.creation import create_task
from runyard.runtime.orphans import reconcile_orphans
from runyard.workspace.identity import TASK_NAME_RE
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskState


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    ("task", "inputs", "error", "message"),
    [
        ("nope", {}, UnknownTask, "Unknown Task: nope. Available: burst, command, demo"),
        ("demo", {"x": 1, "y": 2, "z": 3}, InvalidInput, "z: unknown input field"),
        ("demo", {"x": "one", "y": 2}, InvalidInput, "x: Input should be a valid integer"),
        ("demo", {"y": 2}, InvalidInput, "x: Field required"),
        ("demo", {"x": 1, "y": 2, "source_tasks": "base#demo"}, InvalidInput,
         "is not a full task id"),
        ("demo", {"x": 1, "y": 2, "source_tasks": "base#demo#a,base#demo#a"}, InvalidInput,
         "more than once"),
        ("demo", {"x": 1, "y": 2, "task_name": "bad name!"}, InvalidInput, "Invalid task_name"),
    ],
)
def test_bad_submissions_write_nothing(supervisor, workspace, task, inputs, error, message):
    with pytest.raises(error, match=message.replace(".", r"\.")):
        supervisor.submit(task, inputs)
    assert files_under(workspace.root) == []
    assert supervisor.active_count() == 0


def test_source_tasks_are_normalised(workspace, registry):
    status = create_task(workspace, registry, "demo",
                         {"x": 1, "y": 2, "source_tasks": " base#demo#a , etl#x#b "})
    assert status.config["source_tasks"] == "base#demo#a,etl#x#b"


@pytest.mark.parametrize("name", [None, ""])
def test_omitted_or_empty_name_is_generated(workspace, registry, name):
    inputs = {"x": 1, "y": 2} if name is None else {"x": 1, "y": 2, "task_name": name}
    first = create_task(workspace, registry, "demo", inputs)
    second = create_task(workspace, registry, "demo", inputs)

    generated = first.config["task_name"]
    assert TASK_NAME_RE.match(generated) and first.task_id == f"base#demo#{generated}"
    assert first.task_id != second.task_id
    assert first.state == "queued" and first.log_path.endswith(f"{first.run_id}.log")


def test_generated_name_skips_an_existing_folder(workspace, registry, monkeypatch):
    taken = create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "taken"})
    names = iter(["taken", "fresh"])
    monkeypatch.setattr(creation, "generate_task_name", lambda *_: next(names))

    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})

    assert status.task_id == "base#demo#fresh"
    assert workspace.read_status(taken.task_id).run_id == taken.run_id


def test_fixed_name_of_an_active_task_raises_task_active(workspace, registry):
    create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "busy"})
    with pytest.raises(TaskActive) as info:
        create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "busy"})
    assert isinstance(info.value, FileExistsError) and "still queued" in str(info.value)


def test_fixed_name_replaces_a_finished_task_but_keeps_its_log(workspace, registry):
    old = create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "re"})
    finished = old.model_copy(update={"state": TaskState.SUCCEEDED})
    workspace.write_status(finished)
    (workspace.task_dir(old.task_id) / "leftover.txt").write_text("old")
    Path(old.log_path).parent.mkdir(parents=True)
    Path(old.log_path).write_text("old log")

    new = create_task(workspace, registry, "demo", {"x": 5, "y": 2, "task_name": "re"})

    assert new.task_id == old.task_id and new.run_id != old.run_id
    assert not (workspace.task_dir(new.task_id) / "leftover.txt").exists()
    assert Path(old.log_path).read_text() == "old log"
    assert [p.name for p in workspace.type_dir("base").iterdir()] == [new.task_id]


@pytest.mark.parametrize("content", ["metadata-only", "no-records", "corrupt", "truncated"])
def test_fixed_name_reuses_a_metadata_only_or_broken_folder(workspace, registry, content):
    task_dir = workspace.task_dir("base#demo#broken")
    task_dir.mkdir()
    if content == "metadata-only":
        (task_dir / "metadata.json").write_text(json.dumps(
            {"task_id": "base#demo#broken", "reg_name": "demo", "created_at": "2020-01-01T00:00:00Z",
             "task_type": "base"}))
    elif content == "corrupt":
        (task_dir / "status.json").write_text("{not json")
    elif content == "truncated":
        (task_dir / "status.json").write_text('{"task_id": "base#demo#broken", "run_id": "ab')

    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "broken"})

    assert workspace.read_status("base#demo#broken").run_id == status.run_id
    assert workspace.read_metadata("base#demo#broken") is None


def test_the_watched_type_folder_sees_each_new_task_folder_arrive_whole(workspace, registry):
    """A folder is built and claimed outside the type folder that the index watches: the
    watch there sees the task folder and its own files, never a staging name or a claim."""
    seen: list[str] = []
    watching, stop = threading.Event(), threading.Event()

    def watch() -> None:
        for changes in watchfiles.watch(
            workspace.type_dir("base"), watch_filter=None, debounce=50, step=10,
            stop_event=stop, rust_timeout=20, yield_on_timeout=True,
        ):  # fmt: skip
            seen.extend(os.path.relpath(path, workspace.type_dir("base")) for _, path in changes)
            watching.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        assert watching.wait(10)
        made = [create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "fixed"}),
                create_task(workspace, registry, "demo", {"x": 1, "y": 2})]  # fmt: skip
        deadline = time.monotonic() + 10
        while not {s.task_id for s in made} <= {p.split(os.sep)[0] for p in seen}:
            assert time.monotonic() < deadline, seen
            time.sleep(0.02)
    finally:
        stop.set()
        watcher.join(10)
    assert {path.split(os.sep)[0] for path in seen} == {status.task_id for status in made}
    assert sorted(os.listdir(workspace.staging_dir)) == []


def test_a_link_in_place_of_the_staging_folder_is_refused(workspace, registry, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    workspace.staging_dir.symlink_to(elsewhere)
    with pytest.raises(NotADirectoryError, match=r"not a folder: .*\.staging"):
        create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "linked"})
    assert list(elsewhere.iterdir()) == []
    assert not os.path.lexists(workspace.task_dir("base#demo#linked"))


def test_a_type_folder_on_another_file_system_still_takes_new_tasks(workspace, registry):
    """A rename cannot cross file systems: where a type folder is a mount or a link to
    another disk, its tasks are built in the type folder itself, and nothing is left."""
    other = Path(tempfile.mkdtemp(prefix="runyard-other-fs-", dir="/dev/shm"))
    try:
        assert os.stat(other).st_dev != os.stat(workspace.root).st_dev, "tmpfs /dev/shm"
        shutil.rmtree(workspace.type_dir("base"))
        workspace.type_dir("base").symlink_to(other)
        for _ in range(2):  # a new folder, then the finished one replaced
            status = create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "far"})
            done = status.model_copy(update={"state": TaskState.SUCCEEDED})
            (other / status.task_id / "status.json").write_text(json.dumps(done.to_json()))
        assert os.listdir(other) == ["base#demo#far"]
        assert workspace.read_status("base#demo#far").run_id == status.run_id
        assert os.listdir(workspace.staging_dir) == []
    finally:
        shutil.rmtree(other)


def test_a_type_folder_removed_since_the_start_is_made_again_by_a_submit(workspace, registry):
    """Type folders are made at start and not looked for at each submit: one removed since
    is made when the folder's rename into it finds it missing, and nothing is left behind."""
    shutil.rmtree(workspace.type_dir("base"))
    named = create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "again"})
    generated = create_task(workspace, registry, "demo", {"x": 3, "y": 4})
    for status in (named, generated):
        assert workspace.read_status(status.task_id) == status
    assert sorted(os.listdir(workspace.type_dir("base"))) == sorted(
        [named.task_id, generated.task_id]
    )
    assert sorted(os.listdir(workspace.staging_dir)) == []


def test_a_link_in_place_of_the_claims_file_is_never_followed(workspace, registry, tmp_path):
    target = tmp_path / "not-a-claims-file"
    (workspace.root / ".claims").symlink_to(target)
    with pytest.raises(OSError) as refused:
        create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "linked"})
    assert refused.value.errno == errno.ELOOP
    assert not target.exists()
    assert not os.path.lexists(workspace.task_dir("base#demo#linked"))


def test_start_up_clears_the_staging_area_and_never_follows_a_link_there(workspace, tmp_path):
    left = workspace.staging_dir / ".staging-0123456789ab-base#demo#half"
    left.mkdir(parents=True)
    (left / "status.json").write_text("{}")
    assert reconcile_orphans(workspace) == [".staging/.staging-0123456789ab-base#demo#half"]
    assert not left.exists()

    workspace.staging_dir.rmdir()
    theirs = tmp_path / "elsewhere" / ".staging-0123456789ab-base#demo#theirs"
    theirs.mkdir(parents=True)
    workspace.staging_dir.symlink_to(theirs.parent)
    assert reconcile_orphans(workspace) == []
    assert theirs.is_dir()


def test_concurrent_fixed_name_submits_in_threads_one_wins(workspace, registry):
    results: list[str] = []
    barrier = threading.Barrier(6)

    def submit() -> None:
        barrier.wait()
        try:
            create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "race"})
            results.append("won")
        except TaskActive:
            results.append("active")

    threads = [threading.Thread(target=submit) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["active"] * 5 + ["won"]


def test_a_claim_in_a_workspace_not_made_yet_makes_its_folder(tmp_path):
    fresh = Workspace.open(tmp_path / "fresh" / "ws", tmp_path / "fresh" / "logs")
    with creation.claim(fresh, "base#demo#first"):
        assert (fresh.root / ".claims").is_file()


CONTENDER = """
import sys, time
from pathlib import Path
from runyard.errors import TaskActive
from runyard.runtime.creation import create_task
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace
root, logs, go = sys.argv[1:4]
ws = Workspace.open(Path(root), Path(logs))
registry = TaskRegistry.load(plugins=False)
while not Path(go).exists():
    time.sleep(0.001)
try:
    status = create_task(ws, registry, "demo", {"x": 1, "y": 2, "task_name": "procrace"})
    print("won", status.run_id)
except TaskActive:
    print("active")
"""


def test_concurrent_fixed_name_submits_in_processes_one_wins(workspace, tmp_path):
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", CONTENDER, str(workspace.root),
                          str(workspace.log_dir), str(go)], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    time.sleep(0.5)
    go.touch()
    outputs = [proc.communicate(timeout=30)[0].split() for proc in procs]

    winners = [out for out in outputs if out[0] == "won"]
    assert len(winners) == 1 and sorted(out[0] for out in outputs) == ["active"] * 3 + ["won"]
    assert workspace.read_status("base#demo#procrace").run_id == winners[0][1]
