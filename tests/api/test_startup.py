"""The port opens at once: /health shows the index being built, a single task is read from
its files meanwhile, lists wait for the whole index (never a partial answer)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from serverproc import ServerProcess, start_server

TASKS = 3000  # three batches of the start-up scan, each slowed down below


def write_tasks(workspace: Path, count: int) -> None:
    folder = workspace / "etl"
    folder.mkdir(parents=True)
    for n in range(count):
        task_id = f"etl#load#t{n}"
        record = {
            "task_id": task_id, "run_id": f"{n:032x}", "task_type": "etl",
            "task_name": "load", "state": "succeeded", "config": {"task_name": f"t{n}"},
            "created_at": f"2026-03-01T10:{n // 60 % 60:02d}:{n % 60:02d}.{n:06d}Z",
            "started_at": None, "finished_at": None, "pid": None, "exit_code": 0,
            "error": "", "result": {"n": n}, "steps": [], "log_path": "",
        }  # fmt: skip
        os.mkdir(folder / task_id)
        (folder / task_id / "status.json").write_bytes(json.dumps(record).encode())


def health(server: ServerProcess) -> dict:
    with server.client() as client:
        reply = client.get("/health")
    assert reply.status_code == 200
    return reply.json()["answer"]


def wait_indexing_under_way(server: ServerProcess) -> dict:
    deadline = time.monotonic() + 20
    while True:
        answer = health(server)
        indexing = answer.get("indexing")
        assert indexing is not None, "the start-up ended before it could be seen"
        if indexing["done"] > 0:
            return answer
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_port_opens_while_indexing_single_reads_go_on_lists_wait(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    write_tasks(root / "ws", TASKS)
    delay = {"RUNYARD_FAULT_DELAY": "index.batch:0.8"}  # >= 2.4 s of indexing
    server = start_server(root, env=delay, wait_ready=False)
    try:
        answer = wait_indexing_under_way(server)
        assert answer["running"] is True and "storage" in answer  # its fields are kept
        assert 0 < answer["indexing"]["done"] < TASKS == answer["indexing"]["total"]

        status = server.call("status", task_id="etl#load#t7")
        assert status["success"] is True and status["answer"]["result"] == {"n": 7}
        assert "indexing" in health(server)  # answered from the file, not after the index

        listed = server.call("list_task_ids")  # waits for the whole index
        assert listed["success"] is True and len(listed["answer"]) == TASKS
        assert "indexing" not in health(server)
        with server.client() as client:
            page = client.get("/api/v1/tasks", params={"limit": 5})
        assert page.status_code == 200, page.text
    finally:
        server.stop()
