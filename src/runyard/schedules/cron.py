"""When a cron schedule ticks, in its own time zone, as UTC instants.

croniter walks the wall clock of the zone: on the spring change a tick in the skipped hour
fires once, at the first minute after it (02:30 in Europe/Berlin on the last Sunday of
March ticks at 03:00 CEST). On the autumn change the repeated hour happens twice; a
schedule with a fixed hour fires once (the first time), as cron does, while one whose hour
field is ``*`` (``*/15 * * * *``) keeps its pace through both.

>>> next_tick("30 2 * * *", "Europe/Berlin", datetime(2026, 3, 28, 12, tzinfo=UTC))
datetime.datetime(2026, 3, 29, 1, 0, tzinfo=datetime.timezone.utc)
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import CroniterError, croniter

from runyard.errors import InvalidSchedule

MAX_STEPS = 100_000  # a walk that long names a range no caller should ask for


def _every_hour(cron: str) -> bool:
    return cron.split()[1].startswith("*")


def _repeated(wall: datetime) -> bool:
    """The second time a wall-clock time happens (the autumn change's repeated hour)."""
    return wall.fold == 1 and wall.replace(fold=0).utcoffset() != wall.utcoffset()


def _walk(cron: str, zone: str, start: datetime, forward: bool) -> Iterator[datetime]:
    walker = croniter(cron, start.astimezone(ZoneInfo(zone)))
    step = walker.get_next if forward else walker.get_prev
    keep_repeats = _every_hour(cron)
    for _ in range(MAX_STEPS):
        try:
            wall = step(datetime)
        except CroniterError:  # no further date (refused when the settings load)
            return
        if keep_repeats or not _repeated(wall):
            yield wall.astimezone(UTC)


def next_tick(cron: str, zone: str, after: datetime) -> datetime:
    """The first tick strictly after ``after`` (an aware time)."""
    tick = next(_walk(cron, zone, after, True), None)
    if tick is None:
        raise InvalidSchedule(f"{cron!r} has no tick after {iso_utc(after)}")
    return tick


def latest_tick(cron: str, zone: str, at: datetime) -> datetime | None:
    """The last tick at or before ``at``; None when none falls in the reachable past."""
    # a walk back from the next whole minute includes a tick at ``at`` itself
    start = at.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return next(_walk(cron, zone, start, False), None)


def ticks_between(
    cron: str, zone: str, first: datetime, last: datetime, limit: int
) -> list[datetime]:
    """Every tick in ``[first, last]``, oldest first; InvalidSchedule when there are more
    than ``limit`` of them (nothing is cut silently)."""
    if last < first:
        raise InvalidSchedule(f"The range ends ({last.isoformat()}) before it starts")
    ticks: list[datetime] = []
    for tick in _walk(cron, zone, first - timedelta(microseconds=1), True):
        if tick > last:
            return ticks
        if len(ticks) == limit:
            raise InvalidSchedule(
                f"The range holds more than {limit} ticks of {cron!r}; ask for a shorter one"
            )
        ticks.append(tick)
    return ticks


def iso_utc(moment: datetime) -> str:
    """An aware time as runyard writes times: UTC, ISO-8601, ``Z``."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_time(text: str, zone: str) -> datetime:
    """An ISO-8601 time; one without an offset is read in ``zone``. InvalidSchedule when
    it is not a time."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        example = "2026-03-01T16:00"
        raise InvalidSchedule(f"{text!r} is not an ISO-8601 time such as {example}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=ZoneInfo(zone))
    return moment.astimezone(UTC)
