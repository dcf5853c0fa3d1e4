"""Reads through the repository: fresh get, refresh, and tolerance of broken folders."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from repo_helpers import make_workspace, put_metadata, put_status

from runyard.errors import InvalidTaskId
from runyard.repository import TaskRepository
from runyard.workspace import Workspace
from runyard.workspace.atomic import write_json_atomic


def scanned(ws: Workspace) -> TaskRepository:
    repo = TaskRepository(ws)
    repo.start(watch=False)
    return repo


def test_empty_workspace_lists_nothing(tmp_path: Path) -> None:
    repo = scanned(Workspace.open(tmp_path / "absent", tmp_path / "logs"))
    assert repo.list_ids() == []
    assert repo.list_statuses() == ([], None)
    assert repo.list_results() == []
    assert len(repo) == 0


def test_get_reads_the_file_and_updates_the_index(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    put_status(ws, "base#demo#a", state="running")
    repo = scanned(ws)
    put_status(ws, "base#demo#a", state="succeeded")
    assert repo.peek("base#demo#a").state == "running"
    got = repo.get("base#demo#a")
    assert got is not None and got.state == "succeeded"
    assert repo.peek("base#demo#a").state == "succeeded"
    assert repo.list_statuses(state="succeeded")[0][0].task_id == "base#demo#a"
    assert repo.list_statuses(state="running")[0] == []


def test_get_of_unknown_or_bad_ids(tmp_path: Path) -> None:
    repo = scanned(make_workspace(tmp_path))
    assert repo.get("base#demo#nothing") is None
    assert repo.get_metadata("base#demo#nothing") is None
    for bad in ["base#demo", "nope#demo#a", "base#demo#../x", "base#de/mo#a", 42]:
        with pytest.raises(InvalidTaskId):
            repo.get(bad)  # type: ignore[arg-type]


def test_refresh_takes_in_writes_made_after_the_scan(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    repo = scanned(ws)
    put_status(ws, "etl#load#one", state="queued", created=5)
    put_metadata(ws, "base#demo#meta-only", created=1)
    assert repo.list_ids() == []
    repo.refresh("etl#load#one")
    repo.refresh("base#demo#meta-only")
    assert repo.list_ids() == ["etl#load#one"]
    assert [m.task_id for m in repo.list_results()] == ["base#demo#meta-only"]
    shutil.rmtree(ws.task_dir("etl#load#one"))
    repo.refresh("etl#load#one")
    assert repo.list_ids() == []
    assert repo.peek("etl#load#one") is None


def test_get_metadata_is_fresh(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    put_status(ws, "base#demo#a")
    repo = scanned(ws)
    assert repo.list_results() == []
    put_metadata(ws, "base#demo#a", created=3)
    meta = repo.get_metadata("base#demo#a")
    assert meta is not None and meta.created_at.startswith("2026-01-01T00:00:03")
    assert [m.task_id for m in repo.list_results()] == ["base#demo#a"]


def broken_folders(ws: Workspace, outside: Path) -> list[str]:
    """One folder per way a record can be unusable; returns their ids."""
    cases = {
        "invalid-json": b"{not json",
        "truncated": json.dumps(put_status(ws, "base#demo#truncated").to_json()).encode()[:40],
        "non-object": b"[1, 2, 3]",
        "bad-state": json.dumps({**_status_dict(ws, "bad-state"), "state": "exploded"}).encode(),
        "wrong-field-type": json.dumps(
            {**_status_dict(ws, "wrong-field-type"), "steps": 7}
        ).encode(),
        "other-id": json.dumps({**_status_dict(ws, "other-id"), "task_id": "base#demo#x"}).encode(),
        "other-type": json.dumps({**_status_dict(ws, "other-type"), "task_type": "etl"}).encode(),
        "not-utf8": b"\xff\xfe{}",
    }
    for name, raw in cases.items():
        task_dir = ws.task_dir(f"base#demo#{name}")
        task_dir.mkdir(parents=True, exist_ok=True)
        (task_dir / "status.json").write_bytes(raw)
    ids = [f"base#demo#{name}" for name in cases]
    target = outside / "real-status.json"
    write_json_atomic(target, _status_dict(ws, "symlinked"))
    ws.task_dir("base#demo#symlinked").mkdir()
    os.symlink(target, ws.task_dir("base#demo#symlinked") / "status.json")
    real_dir = outside / "base#demo#linked-folder"
    real_dir.mkdir()
    write_json_atomic(real_dir / "status.json", _status_dict(ws, "linked-folder"))
    os.symlink(real_dir, ws.task_dir("base#demo#linked-folder"))
    ws.task_dir("base#demo#fifo").mkdir()
    os.mkfifo(ws.task_dir("base#demo#fifo") / "status.json")
    ws.task_dir("base#demo#record-less").mkdir()
    (ws.type_dir("base") / "base#bad name#x").mkdir()
    (ws.type_dir("base") / "etl#demo#wrong-folder").mkdir()
    return ids + [
        "base#demo#symlinked",
        "base#demo#linked-folder",
        "base#demo#fifo",
        "base#demo#record-less",
    ]


def _status_dict(ws: Workspace, name: str) -> dict[str, object]:
    return {
        "task_id": f"base#demo#{name}",
        "run_id": "r",
        "task_type": "base",
        "task_name": "demo",
        "state": "succeeded",
        "created_at": "2026-01-01T00:00:00Z",
    }


def test_broken_folders_read_as_missing_and_never_break_listing(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    put_status(ws, "base#demo#good", created=1)
    broken = broken_folders(ws, outside)
    repo = scanned(ws)
    assert repo.list_ids() == ["base#demo#good"]
    assert [s.task_id for s in repo.list_statuses()[0]] == ["base#demo#good"]
    for task_id in broken:
        assert repo.get(task_id) is None, task_id
        assert repo.get_metadata(task_id) is None, task_id
        repo.refresh(task_id)
    assert repo.list_ids() == ["base#demo#good"]


def test_repository_agrees_with_the_workspace_reader(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    broken = [b for b in broken_folders(ws, outside) if not b.endswith("linked-folder")]
    repo = scanned(ws)
    for task_id in broken:
        assert (repo.get(task_id) is None) == (ws.read_status(task_id) is None), task_id


def test_metadata_tolerance_and_metadata_only_folders(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    put_metadata(ws, "train#fit#only-meta", created=2)
    put_status(ws, "train#fit#bad-meta", created=1)
    (ws.metadata_path("train#fit#bad-meta")).write_text('{"task_id": "train#fit#bad-meta"}')
    put_status(ws, "train#fit#other-meta", created=3)
    put_metadata(ws, "train#fit#y", created=3)
    shutil.copy(ws.metadata_path("train#fit#y"), ws.metadata_path("train#fit#other-meta"))
    repo = scanned(ws)
    assert repo.list_ids() == ["train#fit#other-meta", "train#fit#bad-meta"]
    assert [m.task_id for m in repo.list_results()] == ["train#fit#y", "train#fit#only-meta"]
    assert repo.get("train#fit#only-meta") is None
    assert repo.get_metadata("train#fit#bad-meta") is None
    assert repo.get_metadata("train#fit#other-meta") is None


def test_an_oversized_record_reads_as_missing(tmp_path: Path) -> None:
    from runyard.repository import records

    ws = make_workspace(tmp_path)
    status = put_status(ws, "base#demo#huge")
    padded = {**status.to_json(), "error": "x" * (records.MAX_RECORD_BYTES + 1)}
    write_json_atomic(ws.status_path("base#demo#huge"), padded, fsync=False)
    repo = scanned(ws)
    assert repo.get("base#demo#huge") is None
    assert repo.list_ids() == []
