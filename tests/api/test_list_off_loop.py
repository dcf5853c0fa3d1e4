"""Listing many running-looking tasks settles each one (liveness lock, record reads, the end
of a dead run written) in the thread pool: the event loop keeps answering meanwhile."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from runyard.workspace.layout import Workspace
from serverproc import start_server

COUNT = 3000


def running_record(n: int) -> dict[str, Any]:
    return {
        "task_id": f"etl#load#r{n}", "run_id": f"{n:032x}", "task_type": "etl",
        "task_name": "load", "state": "running", "config": {"task_name": f"r{n}"},
        "created_at": f"2026-03-01T10:{n // 60 % 60:02d}:{n % 60:02d}.{n:06d}Z",
        "started_at": None, "finished_at": None, "pid": None, "exit_code": 0, "error": "",
        "result": {}, "steps": [], "log_path": "",
    }  # fmt: skip


def seed_running(workspace: Path) -> None:
    """Tasks whose worker is gone, written after the server's start-up (which would have
    settled them at once): only a list settles them."""
    ws = Workspace.open(workspace, workspace.parent / "logs")
    for n in range(COUNT):
        data = running_record(n)
        folder = ws.task_dir(data["task_id"])
        folder.mkdir(parents=True)
        (folder / "status.json").write_text(json.dumps(data))


def wait_indexed(server: Any) -> None:
    deadline = time.monotonic() + 30
    while len(server.call("list_task_ids")["answer"]) < COUNT:
        assert time.monotonic() < deadline, "the seeded tasks never all reached the index"
        time.sleep(0.1)


def test_health_answers_while_a_list_settles_many_running_tasks(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    server = start_server(root)
    try:
        seed_running(root / "ws")
        wait_indexed(server)
        listed: dict[str, Any] = {}

        def list_all() -> None:
            listed["answer"] = server.call("list_task_statuses", limit=COUNT)
            listed["ended"] = time.monotonic()

        lister = threading.Thread(target=list_all)
        lister.start()
        time.sleep(0.3)  # the list is settling by now
        with server.client() as client:
            began = time.monotonic()
            health = client.get("/health")
            answered = time.monotonic()
            health_during_list = lister.is_alive()
        lister.join(60)
        assert health.status_code == 200
        answer = listed["answer"]
        assert answer["success"] is True and len(answer["answer"]) == COUNT
        assert {item["state"] for item in answer["answer"]} == {"failed"}  # all settled
        assert health_during_list, "/health waited for the list to end"
        # it did not wait for the list: the list went on well after /health answered (on any
        # machine: a list that ends too soon after it makes the check say nothing, and fail)
        after = listed["ended"] - answered
        assert after > 0.3, f"the list ended {after:.2f} s after /health answered"
        assert answered - began < 0.5, f"/health took {answered - began:.2f} s during the list"
    finally:
        server.stop()
