"""Backup and restore carry the kept runs: each entry, its manifest and the stored files it
names, readable by run id after the restore. An archive whose stored file holds other
bytes than its sha256 name, or is not named by one, is refused before anything is written."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from test_backup_records import tamper

from runyard.backup import BackupError, create_backup, restore_backup, verify_backup
from runyard.workspace.dedup import dedup_entry
from runyard.workspace.history import keep_current_run, run_ids
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskState, TaskStatus
from runyard.workspace.runfiles import open_run_file

TASK = "base#command#sweep"
WEIGHTS = os.urandom(300_000)


def run_with(ws: Workspace, run_id: str, files: dict[str, bytes]) -> None:
    folder = ws.task_dir(TASK)
    folder.mkdir(parents=True)
    ws.write_status(
        TaskStatus(
            task_id=TASK,
            run_id=run_id,
            task_type="base",
            task_name="command",
            state=TaskState.SUCCEEDED,
            config={"task_name": "sweep"},
            created_at=f"2026-12-07T00:00:0{run_id[0]}Z",
        )  # fmt: skip
    )
    for name, data in files.items():
        (folder / name).write_bytes(data)


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    ws = Workspace.open(tmp_path / "ws", tmp_path / "logs")
    ws.ensure()
    for run_id in ("1" * 32, "2" * 32):
        run_with(ws, run_id, {"weights.bin": WEIGHTS, "note.txt": run_id[:4].encode()})
        assert keep_current_run(ws, TASK) == run_id
        dedup_entry(ws, TASK, run_id)
    run_with(ws, "3" * 32, {"note.txt": b"now"})
    target = tmp_path / "b.tar"
    create_backup(ws.root, ws.log_dir, target)
    return target


def test_backup_and_restore_carry_the_kept_runs_and_their_stored_files(archive, tmp_path):
    verify_backup(archive)
    restore_backup(archive, tmp_path / "new-ws", tmp_path / "new-logs")
    ws = Workspace.open(tmp_path / "new-ws", tmp_path / "new-logs")
    assert run_ids(ws, TASK) == ["3" * 32, "2" * 32, "1" * 32]
    for run_id in ("1" * 32, "2" * 32):
        with open_run_file(ws, TASK, run_id, "weights.bin") as opened:
            assert os.pread(opened.fd, 400_000, 0) == WEIGHTS
        with open_run_file(ws, TASK, run_id, "note.txt") as opened:
            assert os.pread(opened.fd, 10, 0) == run_id[:4].encode()


def test_a_stored_file_with_other_bytes_than_its_name_is_refused(archive, tmp_path):
    sha = hashlib.sha256(WEIGHTS).hexdigest()
    member = f"workspace/.history/.blobs/{sha[:2]}/{sha}"
    forged = tamper(archive, tmp_path / "forged.tar", {member: lambda _: b"host secret"})
    for check in (lambda: verify_backup(forged),
                  lambda: restore_backup(forged, tmp_path / "w2", tmp_path / "l2")):  # fmt: skip
        with pytest.raises(BackupError, match="not what its name"):
            check()
    assert not (tmp_path / "w2").exists() or not any((tmp_path / "w2").rglob("*.bin"))


def test_a_stored_file_not_named_by_a_sha256_is_refused(archive, tmp_path):
    sha = hashlib.sha256(WEIGHTS).hexdigest()
    renamed = {f"{sha[:2]}/{sha}": f"{sha[:2]}/not-a-sha"}
    forged = tamper(archive, tmp_path / "renamed.tar", {}, renames=renamed)
    with pytest.raises(BackupError, match="not named <xx>/<sha256>"):
        verify_backup(forged)
