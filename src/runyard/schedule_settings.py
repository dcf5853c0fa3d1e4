"""One schedule's settings: an entry of ``schedules:`` in ``runyard.yaml`` (AxonX 0.2.2's
fields), or the body of ``POST /api/v1/schedules``.

Example::

    schedules:
      download_at_1600:
        backend: cron
        description: Download market data after the weekday close.
        job: download_data          # a registered task (or AxonX's "submit" + arguments.task)
        cron: "0 16 * * 1-5"        # five fields, in ``timezone``
        timezone: Europe/Berlin
        arguments: {days_back: 7}
        concurrency_policy: forbid  # forbid | allow | replace
        history_retention_days: 7
        catch_up: latest            # a tick missed while the server was down: latest | none
        tick_argument: as_of        # the tick's time (UTC, ISO-8601) is passed as this input

Each rule is checked when the settings load, so a bad cron expression or an unknown time
zone is a ``ConfigError`` at start (and a 422 on the API), never a silent schedule that
never fires. This module names croniter but nothing of runyard beyond the base layer.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEDULE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
INPUT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# AxonX schedules a Job; its example schedules the ``submit`` job with ``arguments.task``
SUBMIT_JOB = "submit"
DEFAULT_TIMEZONE = "UTC"
NEVER_FROM = datetime(2000, 1, 1, tzinfo=UTC)

ConcurrencyPolicy = Literal["forbid", "allow", "replace"]
CatchUp = Literal["latest", "none"]


def check_schedule_name(name: str) -> str:
    """``name`` when it is one path component of letters, digits, ``_`` and ``-`` (at most
    64, starting with a letter or digit); else ValueError saying so."""
    if not isinstance(name, str) or not SCHEDULE_NAME.fullmatch(name):
        raise ValueError(
            f"Invalid schedule name {name!r}: use 1 to 64 letters, digits, '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def check_cron(expression: str) -> str:
    """Five cron fields (minute hour day-of-month month day-of-week) croniter accepts."""
    fields = expression.split() if isinstance(expression, str) else []
    if len(fields) != 5 or not croniter.is_valid(" ".join(fields)):
        raise ValueError(
            f"Invalid cron expression {expression!r}: give five fields, minute hour "
            "day-of-month month day-of-week, such as '0 16 * * 1-5'"
        )
    try:  # a leap day comes within eight years; a date that never comes does not
        croniter(" ".join(fields), NEVER_FROM).get_next(datetime)
    except CroniterError:
        raise ValueError(f"Cron expression {expression!r} names a date that never comes") from None
    return " ".join(fields)


def check_timezone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a path
        raise ValueError(
            f"Unknown timezone {name[:100]!r}: use an IANA name such as Europe/Berlin"
        ) from None
    return name


class ScheduleSettings(BaseModel):
    """A cron schedule that submits runs of one task."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["cron"] = "cron"
    description: str = Field("", max_length=2000)
    job: str = Field(min_length=1, max_length=128)
    cron: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    timezone: str = DEFAULT_TIMEZONE
    concurrency_policy: ConcurrencyPolicy = "forbid"
    history_retention_days: int = Field(7, ge=1, le=3650, strict=True)
    catch_up: CatchUp = "latest"
    tick_argument: str | None = None

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        return check_cron(value)

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        return check_timezone(value)

    @field_validator("tick_argument")
    @classmethod
    def _tick_argument(cls, value: str | None) -> str | None:
        if value is not None and not INPUT_NAME.fullmatch(value):
            raise ValueError(f"tick_argument {value!r} is not an input name")
        return value

    @model_validator(mode="after")
    def _task_named(self) -> ScheduleSettings:
        if self.job == SUBMIT_JOB and not isinstance(self.arguments.get("task"), str):
            raise ValueError("job 'submit' needs the task to run in arguments.task")
        if self.tick_argument is not None and self.tick_argument in self.task_inputs():
            raise ValueError(f"tick_argument {self.tick_argument!r} is also in arguments")
        return self

    @property
    def task(self) -> str:
        """The registered task each tick submits."""
        return str(self.arguments["task"]) if self.job == SUBMIT_JOB else self.job

    def task_inputs(self) -> dict[str, Any]:
        """The inputs of each run, without the tick's time."""
        if self.job == SUBMIT_JOB:
            return {k: v for k, v in self.arguments.items() if k != "task"}
        return dict(self.arguments)


def check_schedules(schedules: dict[str, ScheduleSettings]) -> dict[str, ScheduleSettings]:
    for name in schedules:
        check_schedule_name(name)
    return schedules
