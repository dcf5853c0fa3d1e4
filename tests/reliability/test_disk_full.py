"""A full disk is a state, not a crash: on a real small tmpfs (root) and via a fault point.

Covers a final status write, a session create and an upload on a full disk, the slot of
the ended run released to the queue, cancel and delete still answering truthfully, 507s
that leave nothing half-made (a request with an Idempotency-Key too), a key whose answer
the full disk refused left reserved, and recovery once space is freed.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from reliability_helpers import (
    disk_status,
    fill,
    small_disk,
    status_of,
    submit,
    type_folder_entries,
    until,
    wait_cmd,
)

from runyard.api.idempotency import IdempotencyStore
from runyard.api.idempotent import finish_key
from runyard.errors import InsufficientStorage
from runyard.runtime.creation import made_for_key
from serverproc import ServerProcess, start_server

ROUTE = "jobs/submit:admin"

NOTE = "could not be written yet"
FINAL = {"succeeded", "failed", "cancelled"}


@pytest.fixture
def full_disk_server(tmp_path: Path):  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the fault-point test covers this path")
    with small_disk(tmp_path / "disk") as disk:
        server = start_server(
            tmp_path / "srv",
            workspace=disk / "ws",
            config={"max_concurrent_tasks": 1, "min_free_mb": 0, "prefork": False},
        )
        try:
            yield server, disk
        finally:
            server.stop()


def _held_final(server: ServerProcess, task_id: str) -> dict:  # type: ignore[type-arg]
    status = status_of(server, task_id)
    return status if status["state"] in FINAL else {}


def test_full_disk_final_status_is_served_slot_released_and_written_after_space_is_freed(
    full_disk_server: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    server, disk = full_disk_server
    ws = disk / "ws"
    flag = tmp_path / "go"
    first = submit(server, task="command", command=wait_cmd(flag), shell=True)
    second = submit(server, task="command", command="echo second", shell=True)
    until(lambda: status_of(server, first["task_id"])["state"] == "running")
    assert status_of(server, second["task_id"])["state"] == "queued"  # one slot, taken

    filler = fill(disk)
    flag.touch()
    held = until(lambda: _held_final(server, first["task_id"]))
    assert NOTE in held["error"]
    assert disk_status(ws, first["task_id"])["state"] == "running"  # the file is behind
    listed = server.call("list_task_statuses")["answer"]
    assert {s["task_id"]: s["state"] for s in listed}[first["task_id"]] in FINAL
    # the slot came back although nothing could be written: the queue moves on
    until(lambda: _held_final(server, second["task_id"]))
    assert server.call("cancel", task_id=first["task_id"])["answer"] is False
    with server.client() as http:
        health = http.get("/health").json()
    assert health["success"] is True and health["answer"]["running"] is True
    assert health["answer"]["storage"]["unwritten"] >= 1

    os.unlink(filler)
    until(lambda: (disk_status(ws, first["task_id"]) or {}).get("state") in FINAL, 20)
    until(lambda: (disk_status(ws, second["task_id"]) or {}).get("state") in FINAL, 20)
    assert NOTE not in (disk_status(ws, first["task_id"]) or {}).get("error", "")
    assert NOTE not in status_of(server, first["task_id"]).get("error", "")
    deleted = server.call("delete_tasks", task_ids=[first["task_id"]])["answer"]
    assert deleted == [first["task_id"]]
    after = submit(server, task="command", command="echo after", shell=True)
    assert until(lambda: _held_final(server, after["task_id"]))["state"] == "succeeded"


def test_full_disk_refuses_creation_with_507_and_leaves_nothing_half_made(
    full_disk_server: tuple[ServerProcess, Path],
) -> None:
    server, disk = full_disk_server
    ws = disk / "ws"
    with server.client() as http:
        session = http.post("/api/v1/sessions", json={"title": "before"}).json()
    before = type_folder_entries(ws)
    filler = fill(disk)
    with server.client() as http:
        reply = http.post("/jobs/submit", json={"arguments": {"task": "demo", "x": 1, "y": 2}})
        assert reply.status_code == 507, reply.text
        body = reply.json()
        assert body["success"] is False and "disk space" in body["answer"]
        assert type_folder_entries(ws) == before  # no folder without a status, no staging
        keyed = {"arguments": {"task": "demo", "x": 1, "y": 2}}
        key = {"Idempotency-Key": "full-disk-submit"}
        reply = http.post("/jobs/submit", json=keyed, headers=key)
        assert reply.status_code == 507, reply.text  # a key changes nothing of that
        assert type_folder_entries(ws) == before
        run = http.post(
            "/api/v1/runs", json={"sessionId": session["id"], "userPrompt": "hi"},
            headers={"Idempotency-Key": "full-disk-run"},
        )  # fmt: skip
        assert run.status_code == 507, run.text
        assert run.json()["error"]["code"] == "insufficient_storage"
        created = http.post("/api/v1/sessions", json={"title": "full"})
        assert created.status_code == 507, created.text
        assert created.json()["error"]["code"] == "insufficient_storage"
        files = {"file": ("a.txt", b"x" * 200_000, "text/plain")}
        upload = http.post(
            "/api/v1/artifacts/upload", data={"sessionId": session["id"]}, files=files
        )
        assert upload.status_code == 507, upload.text
        assert upload.json()["error"]["code"] == "insufficient_storage"
        listed = http.get("/api/v1/artifacts", params={"sessionId": session["id"]}).json()
        assert listed["items"] == []  # no row without its file
        leftovers = [n for n in os.listdir(ws / "agent" / "uploads") if n.startswith(".")]
        assert leftovers == []

        os.unlink(filler)
        again = http.post("/api/v1/sessions", json={"title": "after"})
        assert again.status_code == 201, again.text
        upload = http.post(
            "/api/v1/artifacts/upload", data={"sessionId": session["id"]}, files=files
        )
        assert upload.status_code == 201, upload.text
        reply = http.post("/jobs/submit", json={"arguments": {"task": "demo", "x": 1, "y": 2}})
        assert reply.status_code == 200 and reply.json()["success"] is True
        # the refused keyed submit made nothing and kept no answer: its retry runs now, once,
        # and is then replayed
        first = http.post("/jobs/submit", json=keyed, headers=key)
        assert first.status_code == 200 and first.json()["success"] is True, first.text
        assert "idempotent-replayed" not in first.headers
        again = http.post("/jobs/submit", json=keyed, headers=key)
        assert again.headers.get("idempotent-replayed") == "true"
        assert again.json()["answer"]["task_id"] == first.json()["answer"]["task_id"]
        kept = ws / "base" / first.json()["answer"]["task_id"]
        # the key's mark (an attribute of the folder, or an empty file): no data to lose
        assert made_for_key(kept, "jobs/submit:admin\nfull-disk-submit")
        # both run to the end (and end before the disk goes, leaving nothing running)
        for submitted in (reply, first):
            task_id = submitted.json()["answer"]["task_id"]
            assert until(lambda t=task_id: _held_final(server, t))["state"] == "succeeded"


def test_low_space_guard_refuses_new_work_and_health_reports_it(tmp_path: Path) -> None:
    server = start_server(tmp_path / "srv", config={"min_free_mb": 10**9})
    try:
        with server.client() as http:
            storage = http.get("/health").json()["answer"]["storage"]
            assert storage["low"] is True and storage["min_free_mb"] == 10**9
            reply = http.post("/jobs/submit", json={"arguments": {"task": "demo", "x": 1, "y": 2}})
            assert reply.status_code == 507 and "min_free_mb" in reply.json()["answer"]
            created = http.post("/api/v1/sessions", json={})
            assert created.status_code == 507
            assert created.json()["error"]["code"] == "insufficient_storage"
        assert type_folder_entries(server.workspace) == []
    finally:
        server.stop()


def test_enospc_fault_point_on_the_final_status_then_recovery(tmp_path: Path) -> None:
    """The non-root path: the final status write fails with ENOSPC while a flag exists."""
    flag, go = tmp_path / "full", tmp_path / "go"
    flag.touch()
    fault = {"RUNYARD_FAULT_ENOSPC": f"status.final:{flag}"}
    server = start_server(  # the server and its workers alike find the disk full
        tmp_path / "srv",
        config={"max_concurrent_tasks": 1, "min_free_mb": 0, "worker_env": fault},
        env=fault,
    )
    try:
        first = submit(server, task="command", command=wait_cmd(go), shell=True)
        second = submit(server, task="command", command="echo second", shell=True)
        until(lambda: status_of(server, first["task_id"])["state"] == "running")
        go.touch()
        held = until(lambda: _held_final(server, first["task_id"]))
        assert NOTE in held["error"]
        until(lambda: _held_final(server, second["task_id"]))  # the slot was released
        flag.unlink()
        ws = server.workspace
        until(lambda: (disk_status(ws, first["task_id"]) or {}).get("state") in FINAL, 20)
        until(lambda: (disk_status(ws, second["task_id"]) or {}).get("state") in FINAL, 20)
        with server.client() as http:
            assert http.get("/health").json()["answer"]["storage"]["unwritten"] == 0
    finally:
        server.stop()


def test_a_key_answered_on_a_full_disk_stays_reserved_and_the_request_still_answers(
    tmp_path: Path,
) -> None:
    """The disk fills between the work and its answer: the store says so as a 507 (not a
    bare SQLite error), the request goes on with what it made, and the key stays reserved,
    so its retry finds that (a released key would let a retry make it again)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    with small_disk(tmp_path / "disk", "2m") as disk:
        store = IdempotencyStore(disk)
        try:
            assert store.reserve(ROUTE, "k", "digest") is None
            filler = fill(disk)
            with pytest.raises(InsufficientStorage):
                store.answer(ROUTE, "k", 200, {"task_id": "base#demo#x" * 2000})
            asyncio.run(finish_key(store.answer, ROUTE, "k", 200, {"task_id": "y" * 20000}))
            with pytest.raises(InsufficientStorage):
                store.reserve(ROUTE, "new", "digest" * 2000)
            os.unlink(filler)
            kept = store.reserve(ROUTE, "k", "digest")
            assert kept is not None and kept.status is None  # reserved, not answered
            store.answer(ROUTE, "k", 200, {"task_id": "base#demo#x"})
            again = store.reserve(ROUTE, "k", "digest")
            assert again is not None and again.body == {"task_id": "base#demo#x"}
        finally:
            store.close()
