"""The start-up scan shared with a helper process: same result as one process, or a fallback."""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from repo_helpers import make_workspace, put_metadata, put_status

from runyard.repository import scan
from runyard.repository.index import TaskIndex
from runyard.repository.records import list_task_folders
from runyard.repository.scan import scan_all
from runyard.workspace import TaskState, Workspace

STATES = [state.value for state in TaskState]


def mixed_workspace(tmp_path: Path) -> Workspace:
    ws = make_workspace(tmp_path)
    for i in range(120):
        task_id = f"{['base', 'etl', 'train'][i % 3]}#job#n{i:03d}"
        put_status(ws, task_id, state=["queued", "running", "succeeded"][i % 3], created=i)
        if i % 3 == 2:
            put_metadata(ws, task_id, created=i, sources="base#job#n000")
    ws.task_dir("base#job#empty").mkdir()
    ws.status_path("base#job#n000").write_text("{broken")
    return ws


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the helper needs two cores")
def test_a_shared_scan_equals_a_single_process_scan(tmp_path: Path) -> None:
    folders = list_task_folders(mixed_workspace(tmp_path).root)
    alone = scan_all(folders)
    shared = scan_all(folders, parallel_min=1)
    assert shared == alone
    assert [task_id for task_id, _ in shared] == [task_id for task_id, _, _ in folders]
    assert sum(1 for _, found in shared if found.metadata is not None) == 40


@pytest.mark.parametrize("python", ["/bin/false", "/nonexistent/python", sys.executable + "-x"])
def test_a_failing_helper_falls_back_to_scanning_here(tmp_path: Path, python: str) -> None:
    folders = list_task_folders(mixed_workspace(tmp_path).root)
    assert scan_all(folders, parallel_min=1, python=python) == scan_all(folders)


def test_a_helper_answering_the_wrong_folders_is_not_trusted(tmp_path: Path) -> None:
    folders = list_task_folders(mixed_workspace(tmp_path).root)
    liar = tmp_path / "liar.py"
    liar.write_text(
        "import pickle, sys\n"
        "pickle.load(sys.stdin.buffer)\n"
        "pickle.dump([('base#job#n001', None)], sys.stdout.buffer)\n"
    )
    fake_python = tmp_path / "python"
    fake_python.write_text(f"#!/bin/sh\nexec {sys.executable} {liar}\n")
    fake_python.chmod(0o755)
    assert scan_all(folders, parallel_min=1, python=str(fake_python)) == scan_all(folders)


def test_loading_at_once_equals_applying_one_by_one(tmp_path: Path) -> None:
    ws = mixed_workspace(tmp_path)
    put_metadata(ws, "predict#p#meta-only", created=500)
    scanned = scan_all(list_task_folders(ws.root))
    loaded, applied = TaskIndex(), TaskIndex()
    loaded.load(scanned)
    for task_id, found in scanned:
        applied.apply_folder(task_id, found)
    buckets = [(t, s) for t in ("base", "etl", "train", "predict") for s in STATES]
    assert loaded.statuses == applied.statuses
    assert loaded.metadata == applied.metadata
    assert loaded.children == applied.children
    assert loaded.active_ids() == applied.active_ids()
    assert "base#job#empty" in loaded.active_ids()
    assert loaded.ids(buckets) == applied.ids(buckets)
    assert loaded.page(buckets, None, 7) == applied.page(buckets, None, 7)


def test_a_whole_answer_is_kept_when_the_helper_is_slow_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    folders = list_task_folders(mixed_workspace(tmp_path).root)
    lingering = tmp_path / "lingering.py"
    lingering.write_text(
        "import pickle, sys, time\n"
        "from runyard.repository.records import scan_folder\n"
        "pairs = pickle.load(sys.stdin.buffer)\n"
        "found = [(task_id, scan_folder(path, task_id)) for task_id, path in pairs]\n"
        "pickle.dump(found, sys.stdout.buffer)\n"
        "sys.stdout.close()\n"
        "time.sleep(30)\n"
    )
    fake_python = tmp_path / "python"
    fake_python.write_text(f"#!/bin/sh\nexec {sys.executable} {lingering}\n")
    fake_python.chmod(0o755)
    monkeypatch.setattr(scan, "HELPER_EXIT_SECONDS", 0.5)
    with caplog.at_level(logging.WARNING, logger="runyard.repository.scan"):
        found = scan_all(folders, parallel_min=1, python=str(fake_python))
    assert found == scan_all(folders)
    assert "scanning its half here" not in caplog.text


def test_the_helpers_whole_answer_is_out_before_it_ends_at_once(tmp_path: Path) -> None:
    folders = list_task_folders(mixed_workspace(tmp_path).root)[:3]  # an answer that stays
    pairs = [(task_id, path) for task_id, path, _ in folders]  # in the buffer until flushed
    helper = subprocess.run(
        [sys.executable, "-c", scan.HELPER],
        input=pickle.dumps(pairs),
        capture_output=True,
        timeout=60,
        check=True,
        env={name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"},
    )
    assert pickle.loads(helper.stdout) == scan_all(folders)
