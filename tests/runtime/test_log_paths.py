"""Which log a reader opens: the one the ids give, never a file a status names outside the
log folder (a sandboxed task can rewrite its status; another tool's may name any path)."""

from __future__ import annotations

import os
from pathlib import Path

from runyard.runtime.creation import create_task
from runyard.runtime.submitters import log_to_read, trusted_log_path
from runyard.workspace.logs import read_log_window


def test_a_status_naming_a_host_file_reads_the_derived_log(workspace, registry, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "reader"})
    forged = status.model_copy(update={"log_path": str(secret)})
    workspace.write_status(forged)

    assert log_to_read(workspace, forged) == status.log_path  # derived, though not made yet
    assert read_log_window(log_to_read(workspace, forged), -1, 4096).content == ""
    Path(status.log_path).parent.mkdir(parents=True)
    Path(status.log_path).write_text("its own log\n")
    assert read_log_window(log_to_read(workspace, forged), -1, 4096).content == "its own log\n"
    assert trusted_log_path(workspace, forged) == status.log_path


def test_another_tools_log_inside_the_log_folder_is_still_read(workspace, registry):
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "legacy"})
    legacy = workspace.log_dir / "legacy-demo.log"
    legacy.write_text("written by another tool\n")
    told = status.model_copy(update={"log_path": str(legacy)})
    workspace.write_status(told)

    assert log_to_read(workspace, told) == str(legacy)
    assert trusted_log_path(workspace, told) == str(legacy)
    outside = workspace.log_dir / ".." / "elsewhere.log"
    escaped = told.model_copy(update={"log_path": os.path.normpath(outside)})
    assert log_to_read(workspace, escaped) == status.log_path


def test_a_run_submitted_task_reads_only_its_derived_log(workspace, registry):
    status = create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": "sandboxed"})
    other = workspace.log_dir / "server.log"
    other.write_text("the server's own log\n")
    forged = status.model_copy(
        update={"log_path": str(other), "submitted_by": {"session_id": "s1", "run_id": "r1"}}
    )

    assert log_to_read(workspace, forged) == status.log_path
    assert trusted_log_path(workspace, forged) == status.log_path
