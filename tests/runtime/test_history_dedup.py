"""Every run kept, stored once: a sweep of one fixed name writing the same large file grows
the disk by about one copy, not one per run; each attempt of a retried task is kept whole
and its own files are read back by its run id."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from runtime_helpers import wait_until

from runyard.runtime.creation import create_task
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.dedup import dedup_all, read_manifest
from runyard.workspace.history import run_dir, run_ids, task_history_dir
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskState
from runyard.workspace.runfiles import list_run_files, open_run_file
from serverproc import start_server

MB = 1024 * 1024
RUNS = 20


def disk_bytes(root: Path) -> int:
    """Bytes of the blocks every file and folder under ``root`` takes (hard links once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            info = os.lstat(os.path.join(folder, name))
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
    return total


def finished(supervisor, workspace, name: str, command: str, **submit):
    handle = supervisor.submit(
        "command", {"command": command, "shell": True, "task_name": name}, **submit
    )
    found = []

    def done() -> bool:
        status = workspace.read_status(handle.task_id)
        ok = status is not None and status.run_id != "" and status.state == "succeeded"
        if ok:
            found.append(status)
        return ok

    wait_until(done, 120)
    return found[0]


def test_a_sweep_of_one_name_writing_the_same_file_stores_it_once(supervisor, workspace, tmp_path):
    source = tmp_path / "weights.bin"
    source.write_bytes(random.Random(20261207).randbytes(50 * MB))
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    before = disk_bytes(workspace.root)
    started = time.monotonic()
    for index in range(RUNS):
        # the task itself writes the 50 MB file, then a small one of its own
        command = f"mkdir -p out && cat {source} > out/weights.bin && echo {index} > out/n.txt"
        last = finished(supervisor, workspace, "sweep", command)
    dedup_all(workspace)  # what the background passes had left, if any
    grown = disk_bytes(workspace.root) - before
    took = time.monotonic() - started
    print(f"\n{RUNS} runs x 50 MiB: disk grew {grown / MB:.1f} MiB in {took:.1f} s")
    # the current run's own copy, one blob, and records: far below 20 x 50 MB
    assert grown < 3 * 50 * MB, grown / MB

    ids = run_ids(workspace, last.task_id)
    assert len(ids) == RUNS and ids[0] == last.run_id
    for position, run_id in enumerate(ids[1:], start=2):
        files = {f["path"]: f for f in list_run_files(workspace, last.task_id, run_id)}
        assert files["out/weights.bin"]["sha256"] == digest
        with open_run_file(workspace, last.task_id, run_id, "out/n.txt") as opened:
            assert os.pread(opened.fd, 10, 0) == f"{RUNS - position}\n".encode()
    oldest = ids[-1]
    assert read_manifest(workspace, last.task_id, oldest)["out/weights.bin"]["sha256"] == digest
    with open_run_file(workspace, last.task_id, oldest, "out/weights.bin") as opened:
        assert hashlib.sha256(os.pread(opened.fd, 51 * MB, 0)).hexdigest() == digest
    assert not (run_dir(workspace, last.task_id, oldest) / "out" / "weights.bin").exists()


def test_each_attempt_of_a_retried_task_is_kept_whole(supervisor, workspace, tmp_path):
    counter = tmp_path / "tries"
    command = (
        f"n=$(( $(cat {counter} 2>/dev/null || echo 0) + 1 )); echo $n > {counter}; "
        'mkdir -p out && echo "attempt $n" > out/attempt.txt && echo "log of $n"; [ $n -ge 3 ]'
    )
    final = finished(supervisor, workspace, "flaky", command, retries=3, retry_delay_seconds=0)
    assert final.attempt == 3
    ids = run_ids(workspace, final.task_id)
    assert len(ids) == 3 and ids[0] == final.run_id
    for attempt, run_id in zip((3, 2, 1), ids, strict=True):
        with open_run_file(workspace, final.task_id, run_id, "out/attempt.txt") as opened:
            assert os.pread(opened.fd, 100, 0) == f"attempt {attempt}\n".encode()
        log = workspace.run_log_path(final.task_id, run_id)
        assert f"log of {attempt}" in Path(log).read_text()
    # the new attempt's folder holds its own files only: nothing of the failed ones
    current = run_dir(workspace, final.task_id, final.run_id)
    assert (current / "out" / "attempt.txt").read_text() == "attempt 3\n"


RERUN_AND_EXIT = """
import sys
from pathlib import Path
from runyard.runtime.creation import create_task
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskState
ws = Workspace.open(Path(sys.argv[1]), Path(sys.argv[2]))
registry = TaskRegistry.load(plugins=False)
first = create_task(ws, registry, "demo", {"x": 1, "y": 2, "task_name": "cli"})
(ws.task_dir(first.task_id) / "big.bin").write_bytes(bytes(range(256)) * (256 * 1024))
ws.write_status(first.model_copy(update={"state": TaskState.SUCCEEDED}))
create_task(ws, registry, "demo", {"x": 1, "y": 2, "task_name": "cli"})
print(first.run_id)
"""


def test_a_process_that_exits_right_after_a_rerun_stores_the_kept_files_first(workspace):
    """A CLI's rerun (no server beside it) exits at once: its exit waits for the pass."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    argv = [sys.executable, "-c", RERUN_AND_EXIT, str(workspace.root), str(workspace.log_dir)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip()
    assert set(read_manifest(workspace, "base#demo#cli", run_id)) == {"big.bin"}
    assert not (run_dir(workspace, "base#demo#cli", run_id) / "big.bin").exists()


def test_a_server_start_stores_the_files_a_crash_left_in_an_entry(tmp_path):
    ws = Workspace.open(tmp_path / "srv" / "ws", tmp_path / "srv" / "logs")
    ws.ensure()
    registry = TaskRegistry.load(plugins=False)
    first = create_task(ws, registry, "demo", {"x": 1, "y": 2, "task_name": "left"})
    (ws.task_dir(first.task_id) / "plain.bin").write_bytes(b"p" * 10_000)
    ws.write_status(first.model_copy(update={"state": TaskState.SUCCEEDED}))
    entry = task_history_dir(ws, first.task_id) / first.run_id
    entry.parent.mkdir(parents=True)
    os.rename(ws.task_dir(first.task_id), entry)  # kept, its pass cut short by a crash
    server = start_server(tmp_path / "srv")
    try:
        wait_until(lambda: read_manifest(ws, first.task_id, first.run_id), 30)
    finally:
        server.stop()
    assert not (entry / "plain.bin").exists()
    with open_run_file(ws, first.task_id, first.run_id, "plain.bin") as opened:
        assert os.pread(opened.fd, 20_000, 0) == b"p" * 10_000
