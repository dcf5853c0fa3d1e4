"""Workspace layout: ``<root>/<task_type>/<task_id>``, computed, never searched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runyard.errors import InvalidTaskId
from runyard.workspace import TaskType, Workspace


def test_paths_are_computed_from_the_id(tmp_path: Path) -> None:
    ws = Workspace.open(tmp_path / "ws", tmp_path / "logs")
    task_dir = ws.root / "etl" / "etl#my-etl#dataset-01"
    assert ws.task_dir("etl#my-etl#dataset-01") == task_dir
    assert ws.status_path("etl#my-etl#dataset-01") == task_dir / "status.json"
    assert ws.metadata_path("etl#my-etl#dataset-01") == task_dir / "metadata.json"
    assert ws.events_path("etl#my-etl#dataset-01") == task_dir / "events.jsonl"
    assert ws.relative(ws.metadata_path("etl#my-etl#dataset-01")) == (
        "etl/etl#my-etl#dataset-01/metadata.json"
    )
    assert not task_dir.exists()


def test_open_makes_paths_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ws = Workspace.open(Path(".runyard"), Path("logs"))
    assert ws.root == tmp_path / ".runyard" and ws.log_dir == tmp_path / "logs"


@pytest.mark.parametrize("bad", ["base#demo#../../etc", "base#demo", "../base#demo#x", "x#y#z"])
def test_a_bad_id_never_becomes_a_path(tmp_path: Path, bad: str) -> None:
    ws = Workspace.open(tmp_path / "ws", tmp_path / "logs")
    for method in (ws.task_dir, ws.status_path, ws.claim_slot, ws.lock_path):
        with pytest.raises(InvalidTaskId):
            method(bad)
    with pytest.raises(InvalidTaskId):
        ws.run_log_path(bad, "run")


def test_each_run_has_its_own_log_outside_the_workspace(tmp_path: Path) -> None:
    ws = Workspace.open(tmp_path / "ws", tmp_path / "logs")
    first = ws.run_log_path("base#demo#a", "run1")
    second = ws.run_log_path("base#demo#a", "run2")
    assert first != second and first.parent == second.parent
    assert ws.log_dir in first.parents and ws.root not in first.parents


def test_ensure_creates_the_type_folders_and_log_folder(tmp_path: Path) -> None:
    ws = Workspace.open(tmp_path / "ws", tmp_path / "elsewhere" / "logs")
    ws.ensure()
    ws.ensure()
    assert sorted(p.name for p in ws.root.iterdir()) == sorted(t.value for t in TaskType)
    assert ws.log_dir.is_dir()


def test_a_seed_style_workspace_is_read_as_is(tmp_path: Path) -> None:
    ws = Workspace.open(tmp_path / ".axonx", tmp_path / "logs")
    for extra in ["tushare/raw", "plugins/artifacts", "agent/sessions", "base", "etl"]:
        (ws.root / extra).mkdir(parents=True)
    for task_id in ["base#demo#trial-01", "etl#my-etl#dataset-01"]:
        ws.task_dir(task_id).mkdir()
    (ws.root / "etl" / "etl#my-etl#dataset-01" / "data").mkdir()
    (ws.root / "base" / ".base#demo#x.claim").write_text("")
    (ws.root / "base" / "base#demo#a-file").write_text("")
    (ws.root / "base" / "etl#wrong#folder").mkdir()
    os.symlink(ws.task_dir("base#demo#trial-01"), ws.root / "base" / "base#demo#link")
    found = sorted(task_id for task_id, _ in ws.iter_task_dirs())
    assert found == ["base#demo#trial-01", "etl#my-etl#dataset-01"]
