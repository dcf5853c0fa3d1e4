"""Listing a run's files hashes plain files within a bytes budget: a run holding many large
files is listed without reading all of them; stored files always carry their sha256."""

from __future__ import annotations

import hashlib
from pathlib import Path

from runyard.workspace import runfiles
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskState, TaskStatus

TASK = "base#command#listed"


def test_plain_files_are_hashed_within_the_budget(tmp_path: Path, monkeypatch) -> None:
    ws = Workspace.open(tmp_path / "ws", tmp_path / "logs")
    ws.task_dir(TASK).mkdir(parents=True)
    status = TaskStatus(
        task_id=TASK, run_id="a" * 32, task_type="base", task_name="command",
        state=TaskState.SUCCEEDED, config={}, created_at="2026-12-07T00:00:00Z",
    )  # fmt: skip
    ws.write_status(status)
    for name in ("a.bin", "b.bin", "c.bin"):
        (ws.task_dir(TASK) / name).write_bytes(name.encode() * 100)  # 500 bytes each
    monkeypatch.setattr(runfiles, "HASH_BUDGET", 1499)  # a.bin and b.bin, not c.bin
    listed = {f["path"]: f["sha256"] for f in runfiles.list_run_files(ws, TASK, "a" * 32)}
    assert listed["a.bin"] == hashlib.sha256(b"a.bin" * 100).hexdigest()
    assert listed["b.bin"] == hashlib.sha256(b"b.bin" * 100).hexdigest()
    assert listed["c.bin"] is None  # over the budget: listed, not read
