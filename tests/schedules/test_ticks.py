"""The tick logic with an injected clock: cron in a time zone across DST, due ticks,
concurrency policies, catch-up after a restart, history kept and pruned, backfill."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from runyard.config import Settings
from runyard.errors import ConfigError, InvalidSchedule
from runyard.schedule_settings import ScheduleSettings
from runyard.schedules.cron import iso_utc, ticks_between
from runyard.schedules.firing import Actions
from runyard.schedules.history import MAX_RECORDS, new_record, prune, settle
from runyard.schedules.scheduler import Scheduler
from runyard.schedules.store import ScheduleStore


class Clock:
    def __init__(self, moment: datetime) -> None:
        self.moment = moment

    def __call__(self) -> datetime:
        return self.moment


class Tasks:
    """A task table the schedules act on: each submit makes a task in ``state``."""

    def __init__(self) -> None:
        self.states: dict[str, str] = {}
        self.submits: list[tuple[str, dict[str, Any], str]] = []
        self.cancelled: list[str] = []
        self.state = "running"

    def submit(self, task: str, inputs: dict[str, Any], by: str) -> dict[str, Any]:
        task_id = f"base#{task}#t{len(self.submits)}"
        self.submits.append((task, inputs, by))
        self.states[task_id] = self.state
        return {"task_id": task_id, "run_id": "r" * 32, "task": task}

    def cancel(self, task_id: str) -> bool:
        self.cancelled.append(task_id)
        self.states[task_id] = "cancelled"
        return True

    def actions(self) -> Actions:
        return Actions(self.submit, self.states.get, self.cancel)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def schedule(**fields: Any) -> ScheduleSettings:
    return ScheduleSettings.model_validate(
        {"job": "demo", "cron": "* * * * *", "arguments": {"x": 1, "y": 2}, **fields}
    )


def make(tmp_path: Path, clock: Clock, tasks: Tasks, **fields: Any) -> Scheduler:
    scheduler = Scheduler(
        {"every": schedule(**fields)}, ScheduleStore(tmp_path), tasks.actions(), clock=clock,
        cancel_wait=1.0,
    )  # fmt: skip
    scheduler.load()
    return scheduler


def test_daily_0230_berlin_across_the_march_change() -> None:
    ticks = ticks_between(
        "30 2 * * *", "Europe/Berlin", at("2026-03-27T00:00"), at("2026-03-31T00:00"), 10
    )
    assert [iso_utc(t) for t in ticks] == [
        "2026-03-27T01:30:00Z",  # 02:30 CET
        "2026-03-28T01:30:00Z",
        "2026-03-29T01:00:00Z",  # 02:30 does not exist: once, at 03:00 CEST
        "2026-03-30T00:30:00Z",  # 02:30 CEST
    ]


def test_repeated_autumn_hour_fires_a_fixed_hour_once_and_keeps_a_pace() -> None:
    first, last = at("2026-10-24T12:00"), at("2026-10-26T12:00")
    daily = ticks_between("30 2 * * *", "Europe/Berlin", first, last, 10)
    assert [iso_utc(t) for t in daily] == ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
    night = ticks_between(
        "*/30 * * * *", "Europe/Berlin", at("2026-10-24T23:45"), at("2026-10-25T01:45"), 10
    )
    assert [iso_utc(t) for t in night] == [
        "2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z",
        "2026-10-25T01:30:00Z",
    ]  # fmt: skip


def test_a_minute_schedule_fires_at_its_minute_and_once(tmp_path: Path) -> None:
    clock, tasks = Clock(at("2026-05-04T10:00:30")), Tasks()
    scheduler = make(tmp_path, clock, tasks)
    assert scheduler.seconds_to_next() == pytest.approx(30.0)
    clock.moment = at("2026-05-04T10:00:59")
    assert scheduler.run_due() == []
    clock.moment = at("2026-05-04T10:01:00.2")
    [record] = scheduler.run_due()
    assert record["tick"] == "2026-05-04T10:01:00Z" and record["outcome"] == "submitted"
    assert record["kind"] == "tick" and record["task_id"] == "base#demo#t0"
    assert tasks.submits == [("demo", {"x": 1, "y": 2}, "schedule:every")]
    assert scheduler.run_due() == []  # the same minute never fires twice


def test_forbid_skips_while_the_last_run_is_active_and_says_so(tmp_path: Path) -> None:
    clock, tasks = Clock(at("2026-05-04T10:00:30")), Tasks()
    scheduler = make(tmp_path, clock, tasks)
    clock.moment = at("2026-05-04T10:01:00")
    scheduler.run_due()
    clock.moment = at("2026-05-04T10:02:00")
    [skipped] = scheduler.run_due()
    assert skipped["outcome"] == "skipped" and skipped["state"] == "skipped"
    assert "forbid" in skipped["reason"] and "base#demo#t0 is running" in skipped["reason"]
    assert len(tasks.submits) == 1 and skipped["task_id"] is None
    tasks.states["base#demo#t0"] = "succeeded"
    clock.moment = at("2026-05-04T10:03:00")
    assert scheduler.run_due()[0]["outcome"] == "submitted"


def test_allow_submits_and_replace_cancels_first(tmp_path: Path) -> None:
    clock, tasks = Clock(at("2026-05-04T10:00:30")), Tasks()
    allow = make(tmp_path / "a", clock, tasks, concurrency_policy="allow")
    for minute in (1, 2):
        clock.moment = at(f"2026-05-04T10:0{minute}:00")
        assert allow.run_due()[0]["outcome"] == "submitted"
    assert tasks.cancelled == [] and len(tasks.submits) == 2
    replacing = Tasks()
    replace = make(tmp_path / "r", clock, replacing, concurrency_policy="replace")
    for minute in (3, 4):
        clock.moment = at(f"2026-05-04T10:0{minute}:00")
        last = replace.run_due()[0]
    assert last["outcome"] == "submitted" and "cancelled base#demo#t0" in last["reason"]
    assert replacing.cancelled == ["base#demo#t0"] and len(replacing.submits) == 2


def test_catch_up_latest_runs_the_missed_tick_once_after_a_restart(tmp_path: Path) -> None:
    clock, tasks = Clock(at("2026-05-04T10:00:30")), Tasks()
    make(tmp_path, clock, tasks, cron="0 * * * *")  # first seen: counted from now
    clock.moment = at("2026-05-04T14:20:00")  # down for four hours: four ticks missed
    scheduler = make(tmp_path, clock, tasks, cron="0 * * * *")
    [record] = scheduler.run_due()
    assert record["kind"] == "catch_up" and record["tick"] == "2026-05-04T14:00:00Z"
    assert len(tasks.submits) == 1 and scheduler.run_due() == []


def test_catch_up_none_runs_nothing_and_says_why(tmp_path: Path) -> None:
    clock, tasks = Clock(at("2026-05-04T10:00:30")), Tasks()
    make(tmp_path, clock, tasks, cron="0 * * * *", catch_up="none")
    clock.moment = at("2026-05-04T14:20:00")
    scheduler = make(tmp_path, clock, tasks, cron="0 * * * *", catch_up="none")
    [record] = scheduler.run_due()
    assert record["outcome"] == "skipped" and "catch_up: none" in record["reason"]
    assert tasks.submits == []
    clock.moment = at("2026-05-04T15:00:00")  # the next tick while up runs as usual
    assert scheduler.run_due()[0]["outcome"] == "submitted"


def test_history_survives_a_restart_and_is_pruned(tmp_path: Path) -> None:
    clock, tasks = Clock(at("2026-05-04T10:00:30")), Tasks()
    tasks.state = "succeeded"
    scheduler = make(tmp_path, clock, tasks, history_retention_days=2)
    clock.moment = at("2026-05-04T10:01:00")
    first = scheduler.run_due()[0]
    again = make(tmp_path, clock, tasks, history_retention_days=2)
    assert again.entry("every").state.history == [first]
    clock.moment = at("2026-05-06T10:02:00")  # two days and a minute later
    latest = again.run_due()[0]
    assert again.entry("every").state.history == [latest]
    assert make(tmp_path, clock, tasks).entry("every").state.history == [latest]


def test_pause_resume_and_trigger(tmp_path: Path) -> None:
    clock, tasks = Clock(at("2026-05-04T10:00:30")), Tasks()
    scheduler = make(tmp_path, clock, tasks)
    scheduler.set_paused("every", True)
    clock.moment = at("2026-05-04T10:05:00")
    assert scheduler.run_due() == []
    assert make(tmp_path, clock, tasks).entry("every").state.paused is True  # kept
    scheduler.set_paused("every", False)
    assert scheduler.run_due() == []  # ticks that came while paused are not run
    record = scheduler.trigger("every")
    assert record["kind"] == "trigger" and record["outcome"] == "submitted"


def test_backfill_one_run_per_tick_with_the_tick_time(tmp_path: Path) -> None:
    clock, tasks = Clock(at("2026-05-04T10:00:30")), Tasks()
    scheduler = make(tmp_path, clock, tasks, cron="0 16 * * 1-5", tick_argument="as_of",
                     arguments={"x": 1})  # fmt: skip
    records = scheduler.backfill("every", "2026-04-24T00:00", "2026-04-29T00:00")
    assert [r["kind"] for r in records] == ["backfill"] * 3  # Fri, Mon, Tue
    assert [inputs["as_of"] for _, inputs, _ in tasks.submits] == [
        "2026-04-24T16:00:00Z", "2026-04-27T16:00:00Z", "2026-04-28T16:00:00Z",
    ]  # fmt: skip
    with pytest.raises(InvalidSchedule, match="more than 500"):
        scheduler.backfill("every", "2023-01-01T00:00", "2026-05-01T00:00")
    assert len(tasks.submits) == 3  # a refused range submits nothing
    with pytest.raises(InvalidSchedule, match="end in the past"):
        scheduler.backfill("every", "2026-05-04T00:00", "2026-05-05T00:00")


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"cron": "61 * * * *"}, "Invalid cron expression"),
        ({"cron": "* * * * * *"}, "five fields"),
        ({"timezone": "Europe/Atlantis"}, "Unknown timezone"),
        ({"cron": "0 0 30 2 *"}, "never comes"),
        ({"concurrency_policy": "queue"}, "concurrency_policy"),
        ({"catch_up": "all"}, "catch_up"),
        ({"history_retention_days": 0}, "history_retention_days"),
    ],
)
def test_bad_schedule_config_is_a_config_error(
    tmp_path: Path, fields: dict[str, Any], says: str
) -> None:
    import yaml

    entry = {"job": "demo", "cron": "* * * * *", **fields}
    path = tmp_path / "runyard.yaml"
    path.write_text(yaml.safe_dump({"schedules": {"nightly": entry}}))
    with pytest.raises(ConfigError, match=says):
        Settings.load(config_file=path)


def test_bad_schedule_name_in_config_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "runyard.yaml"
    path.write_text('schedules:\n  "../up":\n    job: demo\n    cron: "* * * * *"\n')
    with pytest.raises(ConfigError, match="Invalid schedule name"):
        Settings.load(config_file=path)


def test_stored_created_schedule_keeps_its_settings(tmp_path: Path) -> None:
    clock, tasks = Clock(at("2026-05-04T10:00:30")), Tasks()
    scheduler = Scheduler({}, ScheduleStore(tmp_path), tasks.actions(), clock=clock)
    scheduler.load()
    scheduler.create("hourly", schedule(cron="0 * * * *"))
    again = Scheduler({}, ScheduleStore(tmp_path), tasks.actions(), clock=clock)
    again.load()
    assert again.entry("hourly").settings.cron == "0 * * * *"
    clock.moment = clock.moment + timedelta(hours=1)
    assert again.run_due()[0]["tick"] == "2026-05-04T11:00:00Z"


def test_history_is_held_to_its_newest_records() -> None:
    now = at("2026-05-04T10:00:00")
    record = settle(new_record("s", "demo", "id", now, now, "tick"), "skipped", now)
    kept = prune([{**record, "trigger_id": str(n)} for n in range(MAX_RECORDS + 50)], 7, now)
    assert len(kept) == MAX_RECORDS and kept[-1]["trigger_id"] == str(MAX_RECORDS + 49)


def test_a_0230_berlin_schedule_fires_once_a_day_across_the_march_change(tmp_path: Path) -> None:
    clock, tasks = Clock(at("2026-03-27T12:00")), Tasks()
    tasks.state = "succeeded"
    scheduler = make(tmp_path, clock, tasks, cron="30 2 * * *", timezone="Europe/Berlin")
    fired = []
    moment = clock.moment
    while moment < at("2026-03-31T12:00"):  # the ticker's looks, every 5 minutes
        moment += timedelta(minutes=5)
        clock.moment = moment
        fired += [(r["tick"], r["triggered_at"]) for r in scheduler.run_due()]
    assert fired == [
        ("2026-03-28T01:30:00Z", "2026-03-28T01:30:00Z"),  # 02:30 CET
        ("2026-03-29T01:00:00Z", "2026-03-29T01:00:00Z"),  # no 02:30 that day: 03:00 CEST
        ("2026-03-30T00:30:00Z", "2026-03-30T00:30:00Z"),  # 02:30 CEST
        ("2026-03-31T00:30:00Z", "2026-03-31T00:30:00Z"),
    ]
