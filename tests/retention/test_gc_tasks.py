"""``runyard gc`` on finished tasks, against a real server: what a dry run lists is what gc
removes, lineage keeps upstreams, active tasks stay, replaced-run logs stay without
retention, bytes add up."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gc_helpers import disk_bytes, finished, gc, sleeping, task_dir

from serverproc import ServerProcess, start_server


@pytest.fixture
def keep_one(tmp_path: Path) -> Iterator[ServerProcess]:
    server = start_server(tmp_path / "srv", config={"retention": {"keep_last_per_task": 1}})
    try:
        yield server
    finally:
        server.stop()


def test_dry_run_lists_what_gc_removes_and_upstreams_of_kept_tasks_survive(
    keep_one: ServerProcess,
) -> None:
    old = [finished(keep_one, f"old-{i}")["task_id"] for i in range(2)]
    up = finished(keep_one, "up")["task_id"]
    down = finished(keep_one, "down", source=up)["task_id"]  # the newest demo task: kept
    expected_bytes = disk_bytes(
        *(task_dir(keep_one, t) for t in old), *(keep_one.log_dir / "base" / t for t in old)
    )

    preview = gc(keep_one, "--dry-run")
    assert preview["dry_run"] is True
    assert preview["tasks"] == sorted(old)
    assert preview["kept_upstreams"] == [up]
    assert all(task_dir(keep_one, t).is_dir() for t in old)  # a dry run removes nothing

    done = gc(keep_one)
    assert done["dry_run"] is False
    for key in ("tasks", "logs", "run_workspaces", "uploads", "kept_upstreams", "bytes"):
        assert done[key] == preview[key], key
    assert done["bytes"] == expected_bytes > 0
    assert not any(task_dir(keep_one, t).exists() for t in old)
    assert not any((keep_one.log_dir / "base" / t).exists() for t in old)
    assert task_dir(keep_one, up).is_dir() and task_dir(keep_one, down).is_dir()
    assert keep_one.call("status", task_id=up)["answer"]["state"] == "succeeded"
    assert gc(keep_one)["tasks"] == []  # nothing left to collect


def test_include_upstreams_removes_the_upstream_of_a_kept_task(keep_one: ServerProcess) -> None:
    up = finished(keep_one, "up")["task_id"]
    down = finished(keep_one, "down", source=up)["task_id"]
    assert gc(keep_one, "--dry-run")["tasks"] == []

    preview = gc(keep_one, "--dry-run", "--include-upstreams")
    assert preview["tasks"] == [up] and preview["kept_upstreams"] == []
    done = gc(keep_one, "--include-upstreams")
    assert done["tasks"] == [up] and done["bytes"] == preview["bytes"] > 0
    assert not task_dir(keep_one, up).exists()
    graph = keep_one.call("get_task_graph", task_id=down)["answer"]
    assert {n["task_id"]: n["missing"] for n in graph["nodes"]} == {up: True, down: False}


def test_active_tasks_and_their_upstreams_are_never_touched(tmp_path: Path) -> None:
    server = start_server(tmp_path / "srv", config={"retention": {"keep_last_per_task": 0}})
    try:
        up = finished(server, "up")["task_id"]
        lone = finished(server, "lone")["task_id"]
        running = sleeping(server, "runs", source=up)["task_id"]
        assert gc(server, "--dry-run")["tasks"] == [lone]
        done = gc(server)
        assert done["tasks"] == [lone]
        assert done["kept_upstreams"] == [up]
        assert server.call("status", task_id=running)["answer"]["state"] == "running"
        assert task_dir(server, up).is_dir()
        server.call("cancel", task_id=running)
    finally:
        server.stop()


def test_without_retention_the_logs_of_replaced_runs_stay(tmp_path: Path) -> None:
    """They are the logs of the kept runs: they go with them (keep_runs, max_age_days;
    tests/retention/test_gc_history.py), never by gc alone."""
    server = start_server(tmp_path / "srv")  # no retention: no task, no run history goes
    try:
        first = finished(server, "again", x=1)
        second = finished(server, "again", x=5)
        folder = server.log_dir / "base" / first["task_id"]
        replaced = folder / f"{first['run_id']}.log"
        current = Path(second["log_path"])
        assert replaced.is_file() and current.is_file() and replaced != current
        preview = gc(server, "--dry-run")
        done = gc(server)
        assert preview["logs"] == done["logs"] == [] and done["history"] == []
        assert replaced.is_file() and current.is_file()
        chunk = server.call(
            "read_task_log", task_id=first["task_id"], run_id=first["run_id"], offset=0
        )["answer"]
        assert "Demo result=3" in chunk["content"]
    finally:
        server.stop()


def test_the_server_collects_periodically_when_retention_is_configured(tmp_path: Path) -> None:
    config = {"retention": {"max_age_days": 1 / 86400, "interval_seconds": 0.3}}  # 1 s
    server = start_server(tmp_path / "srv", config=config)
    try:
        task_id = finished(server, "ages")["task_id"]
        folder = task_dir(server, task_id)
        deadline = time.monotonic() + 30
        while folder.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not folder.exists()
        assert server.call("list_task_ids")["answer"] == []
    finally:
        assert server.stop() == 0  # the collector stops cleanly with the server
