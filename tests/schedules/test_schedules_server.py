"""Schedules through a real server: the HTTP routes, the list_schedules job, a trigger, the
forbid policy, catch-up across a restart, and a run token refused."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from serverproc import ServerProcess, start_server

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run  # noqa: E402

YEARLY = "0 0 1 1 *"  # never due while a test runs
CONFIG = {
    "schedules": {
        "adder": {"job": "demo", "cron": YEARLY, "arguments": {"x": 2, "y": 3},
                  "description": "Adds two numbers", "timezone": "Europe/Berlin"},
        "sleeper": {"job": "submit", "cron": YEARLY, "concurrency_policy": "forbid",
                    "arguments": {"task": "command", "command": "sleep 30"}},
        "replacer": {"job": "command", "cron": YEARLY, "concurrency_policy": "replace",
                     "arguments": {"command": "sleep 30"}},
    }
}  # fmt: skip


@pytest.fixture(scope="module")
def minutely(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A server with an every-minute schedule, and when it started: made with ``srv``, so
    the wall clock's minute passes while the other tests run, not in the last one alone."""
    every = {"job": "demo", "cron": "* * * * *", "arguments": {"x": 4, "y": 4},
             "concurrency_policy": "allow"}  # fmt: skip
    root = tmp_path_factory.mktemp("minutely")
    started = datetime.now(UTC)
    server = start_server(root / "srv", config={"schedules": {"minutely": every}})
    try:
        yield server, (started, datetime.now(UTC))
    finally:
        server.stop()


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, minutely: Any) -> Any:
    server = start_server(tmp_path_factory.mktemp("schedules"), config=CONFIG)
    try:
        yield server
    finally:
        server.stop()


def schedules(server: ServerProcess) -> httpx.Client:
    return httpx.Client(base_url=server.url + "/api/v1", headers=server.headers, timeout=60)


def wait_state(server: ServerProcess, task_id: str, states: set[str], seconds: float = 60) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status = server.call("status", task_id=task_id)
        if status["success"] and status["answer"]["state"] in states:
            return status["answer"]
        time.sleep(0.1)
    raise AssertionError(f"{task_id} never reached {states}")


def until_history(
    server: ServerProcess, names: set[str], seconds: float = 30
) -> dict[str, dict[str, Any]]:
    """list_schedules once each named schedule has a record (the start-up's catch-up runs
    just after the server answers), or after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        answer = server.call("list_schedules", include_history=True)["answer"]
        listed = {s["name"]: s for s in answer}
        if all(listed[n]["history"] for n in names) or time.monotonic() > deadline:
            return listed
        time.sleep(0.1)


def test_trigger_runs_at_once_and_list_schedules_shows_the_history(srv: ServerProcess) -> None:
    with schedules(srv) as client:
        record = client.post("/schedules/adder/trigger")
        assert record.status_code == 200, record.text
        body = record.json()
        assert body["outcome"] == "submitted" and body["kind"] == "trigger"
        assert body["state"] == "succeeded" and body["result"]["task_id"] == body["task_id"]
    done = srv.call("wait_task", task_id=body["task_id"], run_id=body["run_id"])
    assert done["success"] and done["answer"]["result"]["result"] == 5
    assert done["answer"]["submitted_by"] == "schedule:adder"
    listed = srv.call("list_schedules", name="adder", include_history=True, history_limit=5)
    assert listed["success"] is True
    [adder] = listed["answer"]
    assert adder["name"] == "adder" and adder["job"] == "demo" and adder["cron"] == YEARLY
    assert adder["timezone"] == "Europe/Berlin" and adder["description"] == "Adds two numbers"
    assert adder["next_run_at"].startswith(f"{datetime.now(UTC).year + 1}-01-01T00:00:00+01:00")
    assert adder["history"][-1]["task_id"] == body["task_id"] and adder["history_total"] >= 1
    assert adder["history_scheduler_ids"] == [adder["scheduler_id"]]
    assert adder["last_trigger"]["trigger_id"] == body["trigger_id"]
    plain = srv.call("list_schedules")["answer"]
    assert [s["name"] for s in plain] == ["adder", "replacer", "sleeper"]
    assert "history" not in plain[0] and "result" not in plain[0]["last_trigger"]
    assert srv.call("list_schedules", name="nothing")["answer"] == []
    with srv.client() as client:
        bad = client.post("/jobs/list_schedules", json={"arguments": {"history_limit": 201}})
    assert bad.status_code == 422 and "history_limit" in bad.text


def test_forbid_skips_a_tick_while_the_last_run_is_active_and_says_so(srv: ServerProcess) -> None:
    with schedules(srv) as client:
        first = client.post("/schedules/sleeper/trigger").json()
        assert first["outcome"] == "submitted"
        wait_state(srv, first["task_id"], {"running"})
        second = client.post("/schedules/sleeper/trigger").json()
        assert second["outcome"] == "skipped" and second["task_id"] is None
        assert f"{first['task_id']} is running" in second["reason"]
        assert "forbid" in second["reason"]
        history = client.get("/schedules/sleeper/history").json()
        assert [r["outcome"] for r in history["history"]][-2:] == ["submitted", "skipped"]
        assert srv.call("cancel", task_id=first["task_id"])["answer"] is True
        wait_state(srv, first["task_id"], {"cancelled"})
        third = client.post("/schedules/sleeper/trigger").json()
        assert third["outcome"] == "submitted"
        srv.call("cancel", task_id=third["task_id"])


def test_replace_cancels_the_active_run_then_submits(srv: ServerProcess) -> None:
    with schedules(srv) as client:
        first = client.post("/schedules/replacer/trigger").json()
        wait_state(srv, first["task_id"], {"running"})
        second = client.post("/schedules/replacer/trigger").json()
        assert second["outcome"] == "submitted" and second["task_id"] != first["task_id"]
        assert f"cancelled {first['task_id']}" in second["reason"]
        assert srv.call("status", task_id=first["task_id"])["answer"]["state"] == "cancelled"
        wait_state(srv, second["task_id"], {"running"})
        assert srv.call("cancel", task_id=second["task_id"])["answer"] is True


def test_create_pause_resume_delete_and_bad_input(srv: ServerProcess) -> None:
    good = {"name": "nightly", "job": "demo", "cron": "30 2 * * *", "arguments": {"x": 1, "y": 1},
            "timezone": "Europe/Berlin"}  # fmt: skip
    with schedules(srv) as client:
        for bad, says in (
            ({**good, "cron": "61 2 * * *"}, "Invalid cron expression"),
            ({**good, "cron": "* * * * * *"}, "five fields"),
            ({**good, "timezone": "Europe/Atlantis"}, "Unknown timezone"),
            ({**good, "timezone": "A" * 5000}, "Unknown timezone"),  # longer than a path
            ({**good, "timezone": "../../../etc/localtime"}, "Unknown timezone"),
            ({**good, "cron": "0 0 31 2 *"}, "never comes"),  # valid fields, no date
            ({**good, "arguments": ["x"]}, "arguments"),
            ({**good, "name": "x" * 65}, "Invalid schedule name"),
            ({**good, "job": "no_such_task"}, "Unknown"),
            ({**good, "name": "../etc"}, "Invalid schedule name"),
            ({**good, "concurrency_policy": "queue"}, "concurrency_policy"),
            ({**good, "surprise": 1}, "surprise"),
        ):
            reply = client.post("/schedules", json=bad)
            assert reply.status_code == 422, (bad, reply.text)
            assert reply.json()["error"]["code"] == "invalid_schedule"
            assert says in reply.json()["error"]["message"], reply.text
        listed = [s["name"] for s in client.get("/schedules").json()["items"]]
        assert listed == ["adder", "replacer", "sleeper"]  # nothing was made
        made = client.post("/schedules", json=good)
        assert made.status_code == 201, made.text
        assert made.json()["origin"] == "api" and made.json()["paused"] is False
        assert client.post("/schedules", json=good).status_code == 409
        assert client.post("/schedules", json={**good, "name": "adder"}).status_code == 409
        paused = client.post("/schedules/nightly/pause").json()
        assert paused["paused"] is True and paused["next_run_at"] is None
        assert client.post("/schedules/nightly/resume").json()["paused"] is False
        assert client.delete("/schedules/adder").status_code == 422  # configured
        assert client.delete("/schedules/nightly").json() == {"deleted": "nightly"}
        assert client.get("/schedules/nightly").status_code == 404
        assert client.post("/schedules/nightly/trigger").status_code == 404
        assert not (srv.workspace / ".schedules" / "created" / "nightly.json").exists()


def test_catch_up_across_a_restart(tmp_path: Path) -> None:
    hourly = {"job": "demo", "cron": "0 * * * *", "arguments": {"x": 1, "y": 1}}
    config = {"schedules": {"latest": hourly, "skip": {**hourly, "catch_up": "none"}}}
    server = start_server(tmp_path / "srv", config=config)
    server.stop()
    three_hours_ago = (datetime.now(UTC) - timedelta(hours=3)).isoformat()
    for name in ("latest", "skip"):  # the server was down for three hours
        path = server.workspace / ".schedules" / "state" / f"{name}.json"
        state = json.loads(path.read_text())
        path.write_text(json.dumps({**state, "last_tick": three_hours_ago}))
    server = start_server(tmp_path / "srv", config=config)
    try:
        listed = until_history(server, {"latest", "skip"})
        [caught] = listed["latest"]["history"]
        assert caught["kind"] == "catch_up" and caught["outcome"] == "submitted"
        hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        assert caught["tick"] == hour.isoformat().replace("+00:00", "Z")
        done = server.call("wait_task", task_id=caught["task_id"], run_id=caught["run_id"])
        assert done["answer"]["state"] == "succeeded"
        [skipped] = listed["skip"]["history"]
        assert skipped["outcome"] == "skipped" and "catch_up: none" in skipped["reason"]
        ids = server.call("list_task_ids")["answer"]
        assert ids == [caught["task_id"]]  # catch_up none submitted nothing
    finally:
        server.stop()
    server = start_server(tmp_path / "srv", config=config)  # the history outlives a restart
    try:
        again = server.call("list_schedules", name="latest", include_history=True)["answer"]
        assert [r["trigger_id"] for r in again[0]["history"]] == [caught["trigger_id"]]
    finally:
        server.stop()


def test_a_run_token_can_neither_create_nor_trigger(tmp_path: Path) -> None:
    config = {"schedules": {"adder": {"job": "demo", "cron": YEARLY,
                                      "arguments": {"x": 1, "y": 1}}}}  # fmt: skip
    srv = agent_server(tmp_path / "srv", "none", **config)
    try:
        with api(srv) as client:
            session_id = new_session(client)
            run = create_run(client, session_id, "token\nwait-for go\nanswer done", package="probe")
            run_token = wait_file(client, run["id"], "token").decode()
            try:
                as_run = {"authorization": f"Bearer {run_token}"}
                base = srv.url + "/api/v1/schedules"
                body = {"name": "evil", "job": "demo", "cron": "* * * * *",
                        "arguments": {"x": 1, "y": 1}}  # fmt: skip
                attempts = [
                    httpx.post(base, json=body, headers=as_run, timeout=30),
                    httpx.post(base + "/adder/trigger", headers=as_run, timeout=30),
                    httpx.post(base + "/adder/pause", headers=as_run, timeout=30),
                    httpx.delete(base + "/adder", headers=as_run, timeout=30),
                    httpx.post(base + "/adder/backfill", headers=as_run, timeout=30,
                               json={"from": "2026-01-01T00:00", "to": "2026-01-02T00:00"}),
                    httpx.get(base, headers=as_run, timeout=30),
                ]  # fmt: skip
                for reply in attempts:
                    assert reply.status_code == 403, reply.text
                    assert "admin" in reply.json()["error"]["message"]
                job = httpx.post(srv.url + "/jobs/list_schedules", headers=as_run,
                                 json={"arguments": {}}, timeout=30)  # fmt: skip
                assert job.status_code == 403, job.text
            finally:
                (srv.workspace / "agent" / "session-state" / session_id / "go").touch()
            assert wait_run(client, run["id"])["state"] == "succeeded"
        admin = srv.call("list_schedules", include_history=True)["answer"]
        assert [s["name"] for s in admin] == ["adder"] and admin[0]["history"] == []
        assert srv.call("list_task_ids")["answer"] == []  # nothing was submitted
    finally:
        srv.stop()


@pytest.mark.timeout(180)
def test_an_every_minute_schedule_submits_within_70_seconds_of_the_minute(minutely: Any) -> None:
    """The one test that waits for the wall clock: the ticker thread itself (its server
    started with the module's, see ``minutely``)."""
    server, (started, ready) = minutely
    first = started.replace(second=0, microsecond=0) + timedelta(minutes=1)
    # its ticks count from its scheduler's start, between these two: when a minute turned
    # meanwhile, the next one may be its first
    firsts = [first] if ready < first else [first, first + timedelta(minutes=1)]
    left = (firsts[-1] - datetime.now(UTC)).total_seconds() + 70.0
    listed = until_history(server, {"minutely"}, seconds=max(left, 1.0))
    [record] = listed["minutely"]["history"][:1]
    assert record["kind"] == "tick" and record["outcome"] == "submitted"
    minute = datetime.fromisoformat(record["tick"].replace("Z", "+00:00"))
    assert minute in firsts, (record, firsts)
    submitted = datetime.fromisoformat(record["triggered_at"].replace("Z", "+00:00"))
    assert timedelta(0) <= submitted - minute < timedelta(seconds=70)
    done = server.call("wait_task", task_id=record["task_id"], run_id=record["run_id"])
    assert done["answer"]["result"]["result"] == 8
    assert done["answer"]["submitted_by"] == "schedule:minutely"
