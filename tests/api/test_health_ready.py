"""``GET /health?ready=1``, the readiness probe of ``runyard kubernetes manifests``: 503 while
the start-up builds the index (and before the app is built), 200 once the server is ready;
plain ``/health`` (the liveness and startup probes) answers 200 throughout."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import httpx

from runyard.api.front import _EarlyHealth
from runyard.config import Settings
from serverproc import start_server

TASKS = 1000  # one batch of the start-up scan, slowed down below


def write_tasks(workspace: Path) -> None:
    folder = workspace / "etl"
    folder.mkdir(parents=True)
    for n in range(TASKS):
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


def test_ready_is_503_while_indexing_then_200(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    write_tasks(root / "ws")
    server = start_server(root, env={"RUNYARD_FAULT_DELAY": "index.batch:2.5"}, wait_ready=False)
    try:
        with server.client() as client:
            deadline = time.monotonic() + 20
            while "indexing" not in (live := client.get("/health")).json()["answer"]:
                assert time.monotonic() < deadline, "the start-up ended before it could be seen"
            assert live.status_code == 200  # liveness: alive while it starts
            ready = client.get("/health", params={"ready": "1"})
            assert ready.status_code == 503 and "indexing" in ready.json()["answer"]
            while (ready := client.get("/health", params={"ready": "1"})).status_code == 503:
                assert time.monotonic() < deadline + 20
                time.sleep(0.05)
            assert ready.status_code == 200 and "indexing" not in ready.json()["answer"]
            assert client.get("/health", params={"ready": "maybe"}).status_code == 422
    finally:
        server.stop()


def test_ready_is_503_before_the_app_is_built(tmp_path: Path) -> None:
    settings = Settings(workspace_dir=tmp_path / "ws", log_dir=tmp_path / "logs")
    (tmp_path / "ws").mkdir()

    async def ask(query: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=_EarlyHealth(settings))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.get("/health" + query)

    assert asyncio.run(ask("")).status_code == 200
    for query in ("?ready=1", "?ready=true", "?ready=TRUE"):
        answer = asyncio.run(ask(query))
        assert answer.status_code == 503 and answer.json()["answer"]["indexing"]["total"] == 0
    assert asyncio.run(ask("?ready=0")).status_code == 200
