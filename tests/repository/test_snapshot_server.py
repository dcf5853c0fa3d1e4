"""A real server and its index snapshot: right answers after kill -9 (a stale snapshot), and
``/health`` showing the start's progress when the index comes from the snapshot."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from serverproc import ServerProcess, start_server

pytestmark = pytest.mark.timeout(120)

HOUR_AGO_NS = time.time_ns() - 3600 * 10**9


def write_task(workspace: Path, n: int, state: str = "succeeded") -> Path:
    task_id = f"etl#load#t{n}"
    record = {
        "task_id": task_id, "run_id": f"{n:032x}", "task_type": "etl",
        "task_name": "load", "state": state, "config": {"task_name": f"t{n}"},
        "created_at": f"2026-03-01T10:{n // 60 % 60:02d}:{n % 60:02d}.{n:06d}Z",
        "started_at": None, "finished_at": None, "pid": None, "exit_code": 0,
        "error": "", "result": {"n": n}, "steps": [], "log_path": "",
    }  # fmt: skip
    folder = workspace / "etl" / task_id
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "status.json"
    tmp = folder / ".status.tmp"
    tmp.write_bytes(json.dumps(record).encode())
    tmp.rename(path)  # as a worker writes it: a new file
    return path


def write_aged_tasks(workspace: Path, count: int) -> None:
    for n in range(count):
        path = write_task(workspace, n)
        for aged in (path, path.parent):
            os.utime(aged, ns=(HOUR_AGO_NS, HOUR_AGO_NS))


def states(server: ServerProcess) -> dict[str, str]:
    answer = server.call("list_task_statuses")["answer"]
    return {status["task_id"]: status["state"] for status in answer}


def wait_for_snapshot(workspace: Path, newer_than: float = 0.0) -> None:
    path = workspace / ".index" / "snapshot"
    deadline = time.monotonic() + 30
    while not (path.exists() and path.stat().st_mtime > newer_than):
        assert time.monotonic() < deadline, "no snapshot was written"
        time.sleep(0.05)


def test_a_restart_after_kill_9_gives_the_right_answers(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    workspace = root / "ws"
    write_aged_tasks(workspace, 30)
    server = start_server(root)
    try:
        wait_for_snapshot(workspace)
        write_task(workspace, 3, "failed")  # while it runs, after its snapshot
        for path in (workspace / "etl" / "etl#load#t4").iterdir():
            path.unlink()
        (workspace / "etl" / "etl#load#t4").rmdir()
        write_task(workspace, 99, "cancelled")
    finally:
        server.stop(signal.SIGKILL)
    status = workspace / "etl" / "etl#load#t5" / "status.json"  # while it is down
    status.write_bytes(status.read_bytes().replace(b'"succeeded"', b'"cancelled"'))
    write_task(workspace, 100, "failed")
    server = start_server(root)
    try:
        found = states(server)
    finally:
        server.stop()
    expected = {f"etl#load#t{n}": "succeeded" for n in range(30) if n != 4}
    expected.update({"etl#load#t3": "failed", "etl#load#t5": "cancelled"})
    expected.update({"etl#load#t99": "cancelled", "etl#load#t100": "failed"})
    assert found == expected


def test_health_shows_progress_on_a_start_from_the_snapshot(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    workspace = root / "ws"
    write_aged_tasks(workspace, 3000)  # three batches of the start, each slowed below
    start_server(root).stop()  # a clean stop: the snapshot is written
    wait_for_snapshot(workspace)
    delay = {"RUNYARD_FAULT_DELAY": "index.batch:0.6"}
    server = start_server(root, env=delay, wait_ready=False)
    try:
        seen = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            answer = httpx.get(server.url + "/health", headers=server.headers).json()["answer"]
            if "indexing" not in answer:
                break
            seen.append(answer["indexing"]["done"])
            time.sleep(0.05)
        assert any(0 < done < 3000 for done in seen), seen
        assert seen == sorted(seen)
        assert len(server.call("list_task_ids")["answer"]) == 3000
    finally:
        server.stop()
