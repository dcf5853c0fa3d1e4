"""Kill -9 at every named fault point; on restart nothing is lost, run twice or half-made."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
from reliability_helpers import status_of, until

from serverproc import ServerProcess, start_server

TASK_POINTS = ["status", "status.final", "events", "metadata", "artifact", "submit.staged",
               "idempotency.answer"]  # fmt: skip
AGENT_POINTS = ["sqlite.commit", "upload.finalise"]
KEYS = ["k-a", "k-b", "k-c"]
FINAL = {"succeeded", "failed", "cancelled"}


def _submit(server: ServerProcess, key: str, n: int) -> dict[str, Any] | None:
    command = f"echo {n} > out{n}.txt"  # a file recorded as an artifact: every point is hit
    body = {"arguments": {"task": "command", "command": command, "shell": True,
                          "artifacts": "*.txt"}}  # fmt: skip
    try:
        with server.client(10) as http:
            reply = http.post("/jobs/submit", json=body, headers={"Idempotency-Key": key})
    except httpx.TransportError:
        return None  # the answer was lost to the kill
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()["answer"]
    return answer


def _killed_somewhere(server: ServerProcess) -> bool:
    if server.proc.poll() == -signal.SIGKILL:
        return True
    try:
        statuses = server.call("list_task_statuses", timeout=10)["answer"]
    except httpx.TransportError:
        return False
    return any(s.get("exit_code") == 128 + signal.SIGKILL for s in statuses)


def _check_records(workspace: Path) -> None:
    """Every record parses; no folder lacks a status; no staging or removal folder."""
    staging = workspace / ".staging"
    assert not staging.exists() or list(staging.iterdir()) == [], "half-made folder left"
    for type_dir in workspace.iterdir():
        if not type_dir.is_dir() or type_dir.name.startswith(".") or type_dir.name == "agent":
            continue
        for entry in type_dir.iterdir():
            assert not entry.name.startswith("."), f"half-made folder left: {entry}"
            if not entry.is_dir():
                continue
            assert (entry / "status.json").exists(), f"orphan folder: {entry}"
            json.loads((entry / "status.json").read_bytes())
            if (entry / "metadata.json").exists():
                json.loads((entry / "metadata.json").read_bytes())
            running = [
                line for line in (entry / "events.jsonl").read_text().splitlines()
                if json.loads(line).get("state") == "running"
            ]  # fmt: skip
            assert len(running) <= 1, f"run twice: {entry}"


@pytest.mark.parametrize("point", TASK_POINTS)
def test_kill_at_task_fault_point(tmp_path: Path, point: str) -> None:
    fault = {"RUNYARD_FAULT_POINT": point}
    config = {"min_free_mb": 0, "worker_env": fault, "prefork": False}
    server = start_server(tmp_path / "srv", config=config, env=fault)
    for n, key in enumerate(KEYS):
        if server.proc.poll() is None:
            _submit(server, key, n)
    until(lambda: _killed_somewhere(server), 30)
    server.stop(signal.SIGKILL, keep_runs=True)
    server = start_server(tmp_path / "srv", config={"min_free_mb": 0})
    try:
        answers = [_submit(server, key, n) for n, key in enumerate(KEYS)]
        ids = [a["task_id"] for a in answers if a is not None]
        assert len(ids) == len(KEYS) and len(set(ids)) == len(KEYS)  # none lost, none twice
        assert sorted(server.call("list_task_ids")["answer"]) == sorted(ids)
        for task_id in ids:
            until(lambda t=task_id: status_of(server, t)["state"] in FINAL, 60)
        _check_records(server.workspace)
    finally:
        server.stop()


@pytest.mark.parametrize("point", AGENT_POINTS)
def test_kill_at_agent_fault_point(tmp_path: Path, point: str) -> None:
    server = start_server(
        tmp_path / "srv", config={"min_free_mb": 0}, env={"RUNYARD_FAULT_POINT": point}
    )
    api = server.url + "/api/v1"
    session_id = None
    try:
        with httpx.Client(base_url=api, headers=server.headers, timeout=10) as http:
            created = http.post("/sessions", json={"title": "crash"})
            session_id = created.json()["id"] if created.status_code == 201 else None
            if session_id is not None:
                files = {"file": ("a.csv", b"x,y\n1,2\n", "text/csv")}
                http.post("/artifacts/upload", data={"sessionId": session_id}, files=files)
    except httpx.TransportError:
        pass
    assert server.proc.wait(30) == -signal.SIGKILL
    server.stop(keep_runs=True)
    server = start_server(tmp_path / "srv", config={"min_free_mb": 0})
    try:
        with httpx.Client(base_url=api.replace(api, server.url + "/api/v1"),
                          headers=server.headers, timeout=30) as http:  # fmt: skip
            sessions = http.get("/sessions").json()["items"]
            for session in sessions:
                listed = http.get("/artifacts", params={"sessionId": session["id"]}).json()
                for artifact in listed["items"]:  # no row without its file
                    content = http.get(f"/artifacts/{artifact['id']}/content")
                    assert content.status_code == 200 and content.content == b"x,y\n1,2\n"
            assert http.post("/sessions", json={"title": "after"}).status_code == 201
        uploads = server.workspace / "agent" / "uploads"
        if uploads.exists():
            assert not [n for n in os.listdir(uploads) if n.startswith(".partial-")]
    finally:
        server.stop()
