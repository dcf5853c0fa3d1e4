"""A sandboxed task's files are moved into its task folder as they are; never a record."""

from __future__ import annotations

import json
import os

from runyard.runtime.sandboxfiles import adopt_sandbox_files, sandbox_dir


def test_files_move_up_as_they_are_and_records_never(tmp_path):
    task_dir = tmp_path / "base" / "base#demo#x"
    sandbox = sandbox_dir(task_dir)
    (sandbox / "plots").mkdir(parents=True)
    (sandbox / "plots" / "a.png").write_bytes(b"png")
    os.symlink("/etc/passwd", sandbox / "link")
    for name in ("status.json", "metadata.json", "events.jsonl"):
        (sandbox / name).write_text(json.dumps({"forged": name}))
    (task_dir / "status.json").write_text('{"own": true}')
    (sandbox / ".worker.lock").write_text("")
    for mark in (".cancel", ".idempotency.abcd", ".idempotency-key", ".supervised"):
        (sandbox / mark).write_text("forged")
    (sandbox / ".config").write_text("a task's own dotfile")
    (task_dir / ".worker.lock").write_text("keeper")

    moved = adopt_sandbox_files(task_dir)

    assert moved == [".config", "link", "plots"]
    for mark in (".cancel", ".idempotency.abcd", ".idempotency-key", ".supervised"):
        assert not (task_dir / mark).exists()
    assert (task_dir / "plots" / "a.png").read_bytes() == b"png"
    assert os.readlink(task_dir / "link") == "/etc/passwd"
    assert (task_dir / "status.json").read_text() == '{"own": true}'
    assert not (task_dir / "metadata.json").exists() and not (task_dir / "events.jsonl").exists()
    assert (task_dir / ".worker.lock").read_text() == "keeper"
    assert not sandbox.exists()


def test_a_sandbox_folder_swapped_for_a_link_is_removed_not_followed(tmp_path):
    task_dir = tmp_path / "t"
    task_dir.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep")
    os.symlink(elsewhere, sandbox_dir(task_dir))

    assert adopt_sandbox_files(task_dir) == []
    assert not os.path.lexists(sandbox_dir(task_dir))
    assert (elsewhere / "keep.txt").read_text() == "keep"
    assert sorted(os.listdir(task_dir)) == []
