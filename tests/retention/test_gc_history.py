"""gc and the kept earlier runs (``.history``): ``keep_runs`` keeps the newest N per task,
``max_age_days`` lets old ones go, a vanished task's history follows the same rules, and
a dry run lists exactly what the real run removes; without retention nothing of a kept
run goes (its entry, its log, its stored files); the stored files no kept run names go
after the entries. Real workspace, real records."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from runyard.config import Retention, Settings
from runyard.repository import TaskRepository
from runyard.retention import GcContext, collect
from runyard.runtime.creation import create_task, remove_task_dir
from runyard.runtime.deletion import delete_tasks
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.blobstore import stored_shas
from runyard.workspace.dedup import dedup_entry
from runyard.workspace.history import kept_runs, task_history_dir
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskState
from runyard.workspace.runfiles import open_run_file

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def workspace_at(tmp_path: Path) -> Workspace:
    ws = Workspace.open(tmp_path / "ws", tmp_path / "logs")
    ws.ensure()
    return ws


def runs_of(ws: Workspace, name: str, ages_days: list[float]) -> list[str]:
    """Finished runs of one fixed name, oldest first, ending ``ages_days`` before NOW;
    the run ids in order (the last one is the current run)."""
    registry = TaskRegistry.load(plugins=False)
    run_ids = []
    for age in ages_days:
        status = create_task(ws, registry, "demo", {"x": 1, "y": 2, "task_name": name})
        ended = (NOW - timedelta(days=age)).strftime("%Y-%m-%dT%H:%M:%S.000000Z")
        ws.write_status(
            status.model_copy(
                update={"state": TaskState.SUCCEEDED, "created_at": ended, "finished_at": ended}
            )
        )
        run_ids.append(status.run_id)
    return run_ids


def gc(ws: Workspace, policy: Retention, dry_run: bool = False) -> dict[str, object]:
    repository = TaskRepository(ws)
    repository.start(watch=False)  # it sees every task: a rule that let tasks go shows
    context = GcContext(
        workspace=ws,
        repository=repository,
        delete=lambda ids: delete_tasks(ws, ids),
        policy=policy,
    )
    return collect(context, dry_run=dry_run, now=NOW).to_json()


def test_keep_runs_keeps_the_newest_per_task_and_dry_run_matches(tmp_path: Path) -> None:
    ws = workspace_at(tmp_path)
    a = runs_of(ws, "a", [40, 30, 20, 10])  # 3 kept runs + current
    b = runs_of(ws, "b", [5, 1])  # 1 kept run + current
    policy = Retention(keep_runs=1)
    preview = gc(ws, policy, dry_run=True)
    assert preview["history"] == [f"base#demo#a/{a[1]}", f"base#demo#a/{a[0]}"]  # newest first
    done = gc(ws, policy)
    assert done["history"] == preview["history"] and done["bytes"] == preview["bytes"]
    assert int(done["bytes"]) > 0  # type: ignore[call-overload]
    assert done["tasks"] == []  # keep_runs alone never lets a task go
    assert ws.read_status("base#demo#b").run_id == b[1]
    assert [s.run_id for s in kept_runs(ws, "base#demo#a")] == [a[2]]
    assert [s.run_id for s in kept_runs(ws, "base#demo#b")] == [b[0]]
    assert ws.read_status("base#demo#a").run_id == a[3]
    assert gc(ws, policy)["history"] == []


def test_max_age_lets_old_kept_runs_go_and_no_rule_keeps_all(tmp_path: Path) -> None:
    ws = workspace_at(tmp_path)
    a = runs_of(ws, "aged", [50, 20, 3, 0])
    assert gc(ws, Retention())["history"] == []
    assert len(kept_runs(ws, "base#demo#aged")) == 3
    assert gc(ws, Retention(max_age_days=10, states=["failed"]))["history"] == [
        f"base#demo#aged/{a[1]}", f"base#demo#aged/{a[0]}",
    ]  # fmt: skip
    assert [s.run_id for s in kept_runs(ws, "base#demo#aged")] == [a[2]]
    assert ws.read_status("base#demo#aged") is not None  # only "failed" tasks may go


def test_history_of_a_vanished_task_stays_without_retention(tmp_path: Path) -> None:
    ws = workspace_at(tmp_path)
    runs = runs_of(ws, "gone", [3, 2, 1])
    history = task_history_dir(ws, "base#demo#gone")
    (history / ".tmp-leftover").mkdir()
    assert remove_task_dir(ws, "base#demo#gone")  # as a crash between a keep and the new run
    assert gc(ws, Retention())["history"] == []  # no rule: no run history goes
    assert [s.run_id for s in kept_runs(ws, "base#demo#gone")] == [runs[1], runs[0]]
    done = gc(ws, Retention(keep_runs=0))
    assert sorted(done["history"]) == sorted(f"base#demo#gone/{r}" for r in runs[:2])  # type: ignore[arg-type]
    assert not history.exists()


def test_gc_without_retention_keeps_every_run_its_log_and_its_files(tmp_path: Path) -> None:
    ws = workspace_at(tmp_path)
    registry = TaskRegistry.load(plugins=False)
    run_ids = []
    for index in range(3):
        status = create_task(ws, registry, "demo", {"x": 1, "y": 2, "task_name": "kept"})
        (ws.task_dir(status.task_id) / "model.bin").write_bytes(b"m" * 4096 + bytes([index]))
        (ws.task_dir(status.task_id) / "same.bin").write_bytes(b"s" * 4096)
        ws.write_status(status.model_copy(update={"state": TaskState.SUCCEEDED}))
        log = Path(ws.run_log_path(status.task_id, status.run_id))
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"log of run {index}\n")
        run_ids.append(status.run_id)
    task_id = "base#demo#kept"
    for run_id in run_ids[:2]:
        dedup_entry(ws, task_id, run_id)
    done = gc(ws, Retention())
    assert done["history"] == [] and done["logs"] == [] and done["blobs"] == []
    for index, run_id in enumerate(run_ids[:2]):
        assert Path(ws.run_log_path(task_id, run_id)).read_text() == f"log of run {index}\n"
        with open_run_file(ws, task_id, run_id, "model.bin") as opened:
            assert os.pread(opened.fd, 8192, 0)[-1] == index
    assert len(list(stored_shas(ws))) == 3  # two model.bin and one same.bin

    preview = gc(ws, Retention(keep_runs=1), dry_run=True)
    done = gc(ws, Retention(keep_runs=1))
    assert done["history"] == preview["history"] == [f"{task_id}/{run_ids[0]}"]
    assert done["logs"] == preview["logs"] == [f"base/{task_id}/{run_ids[0]}.log"]
    assert done["blobs"] == preview["blobs"] and len(done["blobs"]) == 1  # run 0's model.bin
    assert done["bytes"] == preview["bytes"]
    assert not Path(ws.run_log_path(task_id, run_ids[0])).exists()
    assert Path(ws.run_log_path(task_id, run_ids[1])).is_file()
    assert len(list(stored_shas(ws))) == 2
    with open_run_file(ws, task_id, run_ids[1], "same.bin") as opened:
        assert os.pread(opened.fd, 8192, 0) == b"s" * 4096


def test_keep_runs_is_a_retention_setting(tmp_path: Path) -> None:
    config = tmp_path / "runyard.yaml"
    config.write_text("retention: {keep_runs: 5}\n")
    settings = Settings.load(config_file=config)
    assert settings.retention.keep_runs == 5
    # keep_runs alone prunes history only: it never makes tasks expire
    assert settings.retention.periodic and not settings.retention.configured
