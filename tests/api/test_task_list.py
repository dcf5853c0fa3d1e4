"""GET /api/v1/tasks: server-side sort with cursors that follow it, totals, definition filter."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from runyard.workspace.atomic import write_json_atomic
from runyard.workspace.layout import Workspace
from serverproc import start_server

STATES = ["succeeded", "failed", "succeeded", "cancelled", "succeeded", "failed", "cancelled"]


def seed(workspace: Path) -> list[dict[str, Any]]:
    """Finished tasks of two definitions, with distinct durations; the last one was
    cancelled before it started (no duration)."""
    ws = Workspace.open(workspace, workspace.parent / "logs")
    ws.ensure()
    records = []
    for n, state in enumerate(STATES):
        name = "alpha" if n % 2 == 0 else "beta"
        task_id = f"etl#{name}#run-{n}"
        created = f"2026-02-01T10:00:{n:02d}.000000Z"
        queued = n == len(STATES) - 1
        finished = None if queued else f"2026-02-01T10:{(n * 7) % 5 + 1:02d}:{n:02d}.000000Z"
        record = {
            "task_id": task_id, "run_id": f"{n:032x}", "task_type": "etl", "task_name": name,
            "state": state, "config": {"task_name": f"run-{n}", "source_tasks": ""},
            "created_at": created, "started_at": None if queued else created,
            "finished_at": finished, "pid": None, "exit_code": 0 if state == "succeeded" else 1,
            "error": "", "result": {}, "steps": [], "log_path": "",
        }  # fmt: skip
        folder = ws.task_dir(task_id)
        folder.mkdir(parents=True)
        write_json_atomic(folder / "status.json", record, fsync=False)
        records.append(record)
    return records


def pages(client: httpx.Client, **query: Any) -> tuple[list[str], int]:
    ids: list[str] = []
    cursor = None
    for _ in range(20):
        params = {**query, **({"cursor": cursor} if cursor else {})}
        reply = client.get("/api/v1/tasks", params=params)
        assert reply.status_code == 200, reply.text
        body = reply.json()
        ids += [item["task_id"] for item in body["items"]]
        cursor = body["next_cursor"]
        if not cursor:
            return ids, body["total"]
    raise AssertionError("paging did not end")


def duration(record: dict[str, Any]) -> float:
    def instant(text: str) -> float:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()

    return instant(record["finished_at"]) - instant(record["started_at"])


def test_sorted_paging_totals_and_filters(tmp_path: Path) -> None:
    records = seed(tmp_path / "srv" / "ws")
    server = start_server(tmp_path / "srv")
    try:
        with server.client() as client:
            check_sorts(client, records)
            check_filters(client, records)
            check_refusals(client)
    finally:
        server.stop()


def check_sorts(client: httpx.Client, records: list[dict[str, Any]]) -> None:
    finished = [r for r in records if r["finished_at"]]
    by_duration = sorted(finished, key=lambda r: (duration(r), r["task_id"]))
    expected = [r["task_id"] for r in by_duration] + ["etl#alpha#run-6"]  # no duration: last
    ids, total = pages(client, sort="duration", order="asc", limit=2)
    assert ids == expected and total == len(records)
    ids, _ = pages(client, sort="duration", order="desc", limit=3)
    assert ids == [r["task_id"] for r in reversed(by_duration)] + ["etl#alpha#run-6"]
    ids, _ = pages(client, sort="task_id", order="asc", limit=4)
    assert ids == sorted(r["task_id"] for r in records)
    newest, total = pages(client, limit=3)  # the default: created_at desc, from the index
    assert newest == [r["task_id"] for r in reversed(records)] and total == len(records)
    ids, _ = pages(client, sort="created_at", order="asc", limit=5)
    assert ids == [r["task_id"] for r in records]


def check_filters(client: httpx.Client, records: list[dict[str, Any]]) -> None:
    ids, total = pages(client, task="beta", sort="state", order="asc", limit=2)
    beta = [r for r in records if r["task_name"] == "beta"]
    assert total == len(beta) == 3
    assert ids == [r["task_id"] for r in sorted(beta, key=lambda r: (r["state"], r["task_id"]))]
    ids, total = pages(client, state="failed", limit=1)
    assert total == 2 and set(ids) == {"etl#beta#run-1", "etl#beta#run-5"}
    one = client.get("/api/v1/tasks", params={"task": "alpha", "limit": 1}).json()
    assert one["total"] == 4 and len(one["items"]) == 1 and one["next_cursor"]


def check_refusals(client: httpx.Client) -> None:
    for params in (
        {"sort": "raw"}, {"sort": "__class__"}, {"sort": "created_at desc"},
        {"order": "up"}, {"limit": "0"}, {"limit": "1001"}, {"limit": "ten"},
        {"cursor": "not-a-cursor"}, {"state": "sleeping"}, {"task_type": "nope"},
    ):  # fmt: skip
        reply = client.get("/api/v1/tasks", params=params)
        assert reply.status_code == 400, (params, reply.status_code, reply.text)
        error = reply.json()["error"]
        assert error["code"] == "invalid_query" and error["message"], params
    by_name = client.get("/api/v1/tasks", params={"sort": "task_id", "limit": 1}).json()
    # a cursor made for one sort is refused by another, never misread as a position in it
    for sort in ("created_at", "duration"):
        reply = client.get("/api/v1/tasks", params={"sort": sort, "cursor": by_name["next_cursor"]})
        assert reply.status_code == 400 and "start again" in reply.json()["error"]["message"]
    assert httpx.get(f"{client.base_url}/api/v1/tasks").status_code == 401
