"""``runyard schedule ...`` and ``Client().schedules`` against a real server: create,
list, trigger, history, backfill with the tick's time as an input, pause, delete."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from runyard.client import AsyncClient, Client
from runyard.errors import NotFound, RequestInvalid
from serverproc import ServerProcess, start_server


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    server = start_server(tmp_path_factory.mktemp("schedule-cli"))
    try:
        yield server
    finally:
        server.stop()


def runyard(srv: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runyard", *args], capture_output=True, text=True,
        env=srv.cli_env(), cwd=srv.root, timeout=120, check=False,
    )  # fmt: skip


def test_cli_create_list_trigger_history_pause_delete(srv: ServerProcess) -> None:
    made = runyard(
        srv, "schedule", "create", "weekday-adder", "--task", "demo", "--cron", "0 16 * * 1-5",
        "--tz", "Europe/Berlin", "x=2", "y=5",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "Created weekday-adder  0 16 * * 1-5 (Europe/Berlin)  demo  next " in made.stdout
    listed = runyard(srv, "schedule", "list", "--json")
    [item] = [s for s in json.loads(listed.stdout) if s["name"] == "weekday-adder"]
    assert item["arguments"] == {"x": 2, "y": 5} and item["origin"] == "api"
    fired = runyard(srv, "schedule", "trigger", "weekday-adder", "--json")
    assert fired.returncode == 0, fired.stderr
    record = json.loads(fired.stdout)
    waited = srv.call("wait_task", task_id=record["task_id"], run_id=record["run_id"])
    assert waited["answer"]["result"]["result"] == 7
    history = runyard(srv, "schedule", "history", "weekday-adder")
    assert "  trigger   submitted  tick " in history.stdout and record["task_id"] in history.stdout
    assert "Paused weekday-adder" in runyard(srv, "schedule", "pause", "weekday-adder").stdout
    assert "paused" in runyard(srv, "schedule", "list").stdout
    assert "Resumed" in runyard(srv, "schedule", "resume", "weekday-adder").stdout
    bad = runyard(srv, "schedule", "create", "broken", "--task", "demo", "--cron", "0 25 * * *")
    assert bad.returncode != 0 and "Invalid cron expression" in bad.stdout + bad.stderr
    gone = runyard(srv, "schedule", "delete", "weekday-adder")
    assert gone.returncode == 0 and "Deleted weekday-adder" in gone.stdout
    missing = runyard(srv, "schedule", "trigger", "weekday-adder")
    assert missing.returncode != 0 and "No schedule named 'weekday-adder'" in (
        missing.stdout + missing.stderr
    )


def test_backfill_submits_one_run_per_tick_with_the_tick_time(srv: ServerProcess) -> None:
    with Client(srv.url, srv.token) as client:
        client.schedules.create(
            "globber", job="command", cron="0 6 * * *", timezone="Europe/Berlin",
            arguments={"command": "true"}, tick_argument="artifacts",
        )  # fmt: skip
    done = runyard(
        srv, "schedule", "backfill", "globber", "--from", "2026-03-27T00:00",
        "--to", "2026-03-30T23:00", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = json.loads(done.stdout)
    assert [r["tick"] for r in records] == [
        "2026-03-27T05:00:00Z", "2026-03-28T05:00:00Z",
        "2026-03-29T04:00:00Z", "2026-03-30T04:00:00Z",  # 06:00 CEST after the change
    ]  # fmt: skip
    assert {r["kind"] for r in records} == {"backfill"}
    for record in records:
        status = srv.call("wait_task", task_id=record["task_id"], run_id=record["run_id"])
        assert status["answer"]["state"] == "succeeded"
        assert status["answer"]["config"]["artifacts"] == record["tick"]
        assert status["answer"]["submitted_by"] == "schedule:globber"
    too_many = runyard(
        srv, "schedule", "backfill", "globber", "--from", "2024-01-01", "--to", "2026-01-01"
    )
    assert too_many.returncode != 0 and "more than 500" in too_many.stdout + too_many.stderr
    ids = srv.call("list_task_ids")["answer"]
    assert len([i for i in ids if i.startswith("base#command#")]) == 4  # the refusal made none


def test_the_typed_clients(srv: ServerProcess) -> None:
    with Client(srv.url, srv.token) as client:
        with pytest.raises(RequestInvalid, match="Unknown timezone"):
            client.schedules.create("typed", job="demo", cron="* * * * *", timezone="Nowhere/X")
        with pytest.raises(NotFound):
            client.schedules.get("typed")
        made = client.schedules.create("typed", job="demo", cron="0 0 1 1 *",
                                       arguments={"x": 1, "y": 1})  # fmt: skip
        assert made["name"] == "typed" and made["history"] == []

    async def drive() -> dict:
        async with AsyncClient(srv.url, srv.token) as client:
            record = await client.schedules.trigger("typed")
            assert record["outcome"] == "submitted"
            assert [s["name"] for s in await client.schedules.list()].count("typed") == 1
            await client.schedules.delete("typed")
            return record

    record = asyncio.run(drive())
    assert srv.call("wait_task", task_id=record["task_id"], run_id=record["run_id"])["success"]
