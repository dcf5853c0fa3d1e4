"""The schedules of one server: configured ones (``schedules:`` in runyard.yaml) and those
made over the API, their state, and what is due.

>>> scheduler = Scheduler(settings.schedules, ScheduleStore(root), actions)
>>> scheduler.start()            # loads, runs what was missed, starts the ticker thread
>>> scheduler.trigger("nightly")  # a run now, under the schedule's concurrency policy
>>> scheduler.stop()

A tick is due when the schedule's next tick after its ``last_tick`` has come. The latest
due tick is fired once (ticks that came while the ticker could not run are not each
repeated); one that came before this scheduler started was missed while the server was
down, and ``catch_up`` decides: ``latest`` fires it, ``none`` records it skipped. A
schedule seen for the first time (or resumed) starts counting from that moment. One lock
orders every change, so a tick, a trigger and a delete never interleave.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from runyard.errors import InvalidSchedule, ScheduleExists, ScheduleNotFound
from runyard.schedule_settings import ScheduleSettings, check_schedule_name
from runyard.schedules.cron import iso_utc, latest_tick, next_tick, parse_time, ticks_between
from runyard.schedules.firing import Actions, Trigger, active_runs, fire
from runyard.schedules.history import Kind, new_record, prune, settle
from runyard.schedules.store import CreatedSchedule, ScheduleState, ScheduleStore
from runyard.schedules.ticker import Ticker

MAX_BACKFILL = 500
log = logging.getLogger("runyard.schedules")
Origin = Literal["config", "api"]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Entry:
    name: str
    settings: ScheduleSettings
    origin: Origin
    state: ScheduleState
    scheduler_id: str


class Scheduler:
    """Every schedule of a server; ``clock`` is injectable so ticks can be tested."""

    def __init__(
        self,
        configured: dict[str, ScheduleSettings],
        store: ScheduleStore,
        actions: Actions,
        *,
        clock: Callable[[], datetime] = utc_now,
        cancel_wait: float = 10.0,
    ) -> None:
        self._configured = dict(configured)
        self._store = store
        self._actions = actions
        self._clock = clock
        self._cancel_wait = cancel_wait
        self._lock = threading.RLock()
        self._entries: dict[str, Entry] = {}
        self._started_at: datetime | None = None
        self._ticker: Ticker | None = None

    # life

    def load(self) -> None:
        """Read every schedule and its state (once; later calls do nothing); nothing fires."""
        with self._lock:
            if self._started_at is not None:
                return
            self._started_at = self._clock()
            self._entries = {}
            for name, settings in self._configured.items():
                self._add(name, settings, "config")
            for item in self._store.created():
                if item.name not in self._entries:
                    self._add(item.name, item.settings, "api")

    def start(self) -> None:
        """Load, deal with the ticks missed while the server was down, start ticking."""
        self.load()
        self.run_due()
        with self._lock:
            if self._ticker is None:
                self._ticker = Ticker(self.run_due, self.seconds_to_next)
                self._ticker.start()

    def stop(self) -> None:
        with self._lock:
            ticker, self._ticker = self._ticker, None
        if ticker is not None:
            ticker.stop()

    def _add(self, name: str, settings: ScheduleSettings, origin: Origin) -> Entry:
        state = self._store.read_state(name)
        entry = Entry(name, settings, origin, state, uuid.uuid4().hex)
        if state.last_tick is None:  # counted from now: nothing before it is missed
            state.last_tick = iso_utc(self._clock())
            try:
                self._store.write_state(state)
            except OSError as exc:  # a full disk: kept in memory, written with its next tick
                log.warning("schedules: cannot record %s's first sight yet: %s", name, exc)
        self._entries[name] = entry
        return entry

    def _wake(self) -> None:
        if self._ticker is not None:
            self._ticker.wake()

    # ticking

    def run_due(self, now: datetime | None = None) -> list[dict[str, Any]]:
        """Fire every schedule whose tick has come by ``now``; the records made."""
        made = []
        with self._lock:
            moment = now or self._clock()
            for entry in list(self._entries.values()):
                try:
                    record = self._run_entry(entry, moment)
                except Exception:  # one schedule's fault (its state unwritable) stops no other
                    log.exception("schedules: %s could not tick", entry.name)
                    continue
                if record is not None:
                    made.append(record)
        return made

    def _run_entry(self, entry: Entry, now: datetime) -> dict[str, Any] | None:
        s, state = entry.settings, entry.state
        if state.paused:
            return None
        last = _parse(state.last_tick) or now
        if next_tick(s.cron, s.timezone, last) > now:
            return None
        tick = latest_tick(s.cron, s.timezone, now) or now
        state.last_tick = iso_utc(tick)
        missed = self._started_at is not None and tick < self._started_at
        if missed and s.catch_up == "none":
            record = new_record(entry.name, s.job, entry.scheduler_id, now, tick, "catch_up")
            reason = "missed while the server was down (catch_up: none)"
            return self._keep(entry, settle(record, "skipped", now, reason=reason))
        return self._fire(entry, tick, "catch_up" if missed else "tick")

    def _fire(self, entry: Entry, tick: datetime | None, kind: Kind, policy: bool = True) -> dict:
        trigger = Trigger(entry.name, entry.settings, entry.scheduler_id, tick, kind, policy)
        record = fire(trigger, entry.state.history, self._actions, self._clock, self._cancel_wait)
        return self._keep(entry, record)

    def _keep(self, entry: Entry, record: dict[str, Any]) -> dict[str, Any]:
        state = entry.state
        days = entry.settings.history_retention_days
        state.history = prune([*state.history, record], days, self._clock())
        self._store.write_state(state)
        return record

    def seconds_to_next(self) -> float:
        """How long until the earliest tick of a running schedule (60 when there is none)."""
        with self._lock:
            now = self._clock()
            ticks = [
                next_tick(e.settings.cron, e.settings.timezone, _parse(e.state.last_tick) or now)
                for e in self._entries.values()
                if not e.state.paused
            ]
        return max(0.0, min([60.0, *((t - now).total_seconds() for t in ticks)]))

    # the API's actions

    @property
    def lock(self) -> threading.RLock:
        """Held while an answer reads several schedules at once."""
        return self._lock

    def entry(self, name: str) -> Entry:
        entry = self._entries.get(name)
        if entry is None:
            raise ScheduleNotFound(name)
        return entry

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._entries)

    def create(self, name: str, settings: ScheduleSettings) -> Entry:
        try:
            check_schedule_name(name)
        except ValueError as exc:
            raise InvalidSchedule(str(exc)) from None
        with self._lock:
            existing = self._entries.get(name)
            if existing is not None:
                raise ScheduleExists(name, existing.origin == "config")
            self._store.remove_state(name)  # a deleted schedule's leftovers start afresh
            self._store.write_created(CreatedSchedule(name, iso_utc(self._clock()), settings))
            entry = self._add(name, settings, "api")
        self._wake()
        return entry

    def delete(self, name: str) -> None:
        with self._lock:
            entry = self.entry(name)
            if entry.origin == "config":
                raise InvalidSchedule(
                    f"Schedule {name!r} is defined in runyard.yaml: remove it there, or pause it"
                )
            self._store.remove_created(name)
            self._store.remove_state(name)
            del self._entries[name]
        self._wake()

    def set_paused(self, name: str, paused: bool) -> Entry:
        with self._lock:
            entry = self.entry(name)
            if entry.state.paused != paused:
                entry.state.paused = paused
                if not paused:  # ticks that came while paused are not run
                    entry.state.last_tick = iso_utc(self._clock())
                self._store.write_state(entry.state)
        self._wake()
        return entry

    def trigger(self, name: str) -> dict[str, Any]:
        """A run now (the time is passed as the tick), under the concurrency policy."""
        with self._lock:
            return self._fire(self.entry(name), self._clock(), "trigger")

    def backfill(self, name: str, first: str, last: str) -> list[dict[str, Any]]:
        """One run per tick in ``[first, last]`` (ISO-8601; without an offset, in the
        schedule's zone), at most :data:`MAX_BACKFILL`, whatever else is active."""
        with self._lock:
            entry = self.entry(name)
            zone = entry.settings.timezone
            start, end = parse_time(first, zone), parse_time(last, zone)
            if end > self._clock():
                raise InvalidSchedule("A backfill range must end in the past")
            ticks = ticks_between(entry.settings.cron, zone, start, end, MAX_BACKFILL)
            return [self._fire(entry, tick, "backfill", policy=False) for tick in ticks]

    def running(self, entry: Entry) -> int:
        return len(active_runs(entry.state.history, self._actions))


def _parse(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
