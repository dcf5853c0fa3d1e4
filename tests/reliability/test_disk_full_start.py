"""A full disk at start and under a queue, on a real small tmpfs (root only).

``serve`` on a full disk starts read-only (reads, delete, 507 for new work) and leaves it by
itself once space is freed; queued runs wait below ``min_free_mb`` with the reason in their
status, and run once there is room; the agent store of a full disk opens read-only.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from reliability_helpers import fill, small_disk, status_of, submit, until, wait_cmd

from runyard.agents.models import Session, SessionStatus
from runyard.agents.store import SQLiteStore
from runyard.client.discovery import read_record
from runyard.errors import InsufficientStorage
from serverproc import ServerProcess, start_server

TOKEN = "full-disk-token-0123456789"
FINAL = {"succeeded", "failed", "cancelled"}
MIB = 1 << 20


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        with small_disk(tmp_path / "disk", "16m") as mounted:
            yield mounted
    except Exception as exc:  # a container without CAP_SYS_ADMIN
        if "mount" not in str(exc):
            raise
        pytest.skip(f"cannot mount a tmpfs here: {exc}")


def _serve(disk: Path, **config: object) -> ServerProcess:
    """A server with its workspace, log folder, config and token file on ``disk``."""
    settings = {"min_free_mb": 2, "prefork": False, **config}
    return start_server(disk / "srv", workspace=disk / "ws", token=TOKEN, config=settings)


def _final(server: ServerProcess, task_id: str) -> dict:  # type: ignore[type-arg]
    status = status_of(server, task_id)
    return status if status["state"] in FINAL else {}


def _recorded_pid(workspace: Path) -> int | None:
    try:
        return json.loads((workspace / "server.json").read_text()).get("pid")
    except (OSError, ValueError):
        return None


def _leave_free(disk: Path, mib: int) -> Path:
    """Fill ``disk``, then give back about ``mib`` MiB: below min_free_mb, yet writable."""
    filler = fill(disk)
    os.truncate(filler, max(0, filler.stat().st_size - mib * MIB))
    return filler


def test_serve_on_a_full_disk_starts_read_only_and_leaves_it_when_space_is_freed(
    disk: Path,
) -> None:
    first = _serve(disk)
    try:
        old = submit(first, task="command", command="echo kept-output", shell=True)
        assert until(lambda: _final(first, old["task_id"]))["state"] == "succeeded"
    finally:
        first.stop()
    filler = fill(disk)

    server = _serve(disk)  # server.json, the agent store and server.log cannot be written
    try:
        banner = "".join(server.output)
        assert "READ-ONLY: the disk is full (server.json could not be written" in banner
        assert f"RUNYARD_URL={server.url}" in banner
        assert _recorded_pid(disk / "ws") != server.proc.pid
        with server.client() as http:
            health = http.get("/health").json()["answer"]
            assert health["running"] is True and health["storage"]["free_mb"] < 1
            # reads: the status, the list, the log, the files, the agent API
            assert status_of(server, old["task_id"])["state"] == "succeeded"
            listed = server.call("list_task_statuses")["answer"]
            assert [s["task_id"] for s in listed] == [old["task_id"]]
            log = server.call("read_task_log", task_id=old["task_id"])["answer"]
            assert "kept-output" in log["content"]
            files = http.get(f"/api/v1/tasks/{quote(old['task_id'], safe='')}/files")
            assert files.status_code == 200, files.text
            sessions = http.get("/api/v1/sessions")
            assert sessions.status_code == 200 and sessions.json()["items"] == []
            # new work: 507, saying why, and nothing made
            reply = http.post("/jobs/submit", json={"arguments": {"task": "demo", "x": 1, "y": 2}})
            assert reply.status_code == 507, reply.text
            assert "read-only" in reply.json()["answer"]
            created = http.post("/api/v1/sessions", json={"title": "full"})
            assert created.status_code == 507, created.text
            assert "read-only" in created.json()["error"]["message"]
            assert sorted(os.listdir(disk / "ws" / "base")) == [old["task_id"]]
            # delete works (and is how space comes back)
            deleted = server.call("delete_tasks", task_ids=[old["task_id"]])["answer"]
            assert deleted == [old["task_id"]]
            assert not (disk / "ws" / "base" / old["task_id"]).exists()

            os.unlink(filler)
            until(lambda: _recorded_pid(disk / "ws") == server.proc.pid, 10)
            record = read_record(disk / "ws")  # what the CLI and Client() find
            assert record is not None and record["url"] == server.url
            assert record["token"] == TOKEN
            # the log's line, not the banner's "leaves read-only mode by itself"
            until(lambda: "; the server leaves read-only mode" in "".join(server.output), 10)
            reply = http.post("/jobs/submit", json={"arguments": {"task": "demo", "x": 1, "y": 2}})
            assert reply.status_code == 200 and reply.json()["success"] is True, reply.text
            task_id = reply.json()["answer"]["task_id"]
            assert until(lambda: _final(server, task_id))["state"] == "succeeded"
            created = http.post("/api/v1/sessions", json={"title": "after"})
            assert created.status_code == 201, created.text
    finally:
        server.stop()


def test_queued_task_waits_for_disk_space_with_its_reason_then_runs(
    disk: Path, tmp_path: Path
) -> None:
    server = _serve(disk, max_concurrent_tasks=1, min_free_mb=4)
    try:
        flag = tmp_path / "go"  # off the small disk
        blocker = submit(server, task="command", command=wait_cmd(flag), shell=True)
        waiting = submit(server, task="command", command="echo ran-after-space", shell=True)
        doomed = submit(server, task="command", command="echo never", shell=True)
        until(lambda: status_of(server, blocker["task_id"])["state"] == "running")

        filler = _leave_free(disk, 1)  # about 1 MB free, min_free_mb 4
        flag.touch()
        assert until(lambda: _final(server, blocker["task_id"]))["state"] == "succeeded"
        held = until(lambda: status_of(server, waiting["task_id"]).get("queued_reason"))
        assert held.startswith("waiting for disk space: ") and "min_free_mb 4" in held
        time.sleep(2.5)  # past a look at the space: still short, still queued
        status = status_of(server, waiting["task_id"])
        assert status["state"] == "queued" and status["started_at"] is None
        assert server.call("cancel", task_id=doomed["task_id"])["answer"] is True
        cancelled = until(lambda: _final(server, doomed["task_id"]))
        assert cancelled["state"] == "cancelled" and "queued_reason" not in cancelled

        os.unlink(filler)
        final = until(lambda: _final(server, waiting["task_id"]), 20)
        assert final["state"] == "succeeded", final
        assert "queued_reason" not in final
        log = server.call("read_task_log", task_id=waiting["task_id"])["answer"]
        assert "ran-after-space" in log["content"]
    finally:
        server.stop()


def test_agent_store_on_a_full_disk_opens_read_only_and_reopens(disk: Path) -> None:
    path = disk / "state.db"
    store = SQLiteStore(path)
    now = "2026-01-01T00:00:00Z"
    store.create_session(Session(id="ses_before", title="before", status=SessionStatus.OPEN,
                                 created_at=now, updated_at=now))  # fmt: skip
    store.close()
    filler = fill(disk)
    store = SQLiteStore(path)  # a plain open fails here: SQLite cannot grow its -shm file
    try:
        assert store.read_only
        assert [s.id for s in store.list_sessions(10).items] == ["ses_before"]
        with pytest.raises(InsufficientStorage):
            store.create_session(Session(id="ses_full", title="full", status=SessionStatus.OPEN,
                                         created_at=now, updated_at=now))  # fmt: skip
        with pytest.raises(Exception) as still_full:
            store.reopen()
        assert store.read_only, still_full.value
        os.unlink(filler)
        store.reopen()
        assert not store.read_only
        store.create_session(Session(id="ses_after", title="after", status=SessionStatus.OPEN,
                                     created_at=now, updated_at=now))  # fmt: skip
        assert {s.id for s in store.list_sessions(10).items} == {"ses_before", "ses_after"}
    finally:
        store.close()
