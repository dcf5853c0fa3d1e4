"""How often a task's failed runs are tried again, and how long it waits first: the
bounds of a submit's ``retries`` and ``retry_delay_seconds`` and of a task class's defaults
(what a retry does is :mod:`runyard.runtime.retries`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runyard.errors import InvalidInput

MAX_RETRIES = 20
DEFAULT_DELAY_SECONDS = 10.0
MAX_DELAY_SECONDS = 3600.0  # the cap of one wait, backoff and jitter included


@dataclass(frozen=True)
class RetryPolicy:
    """How often a task's failed runs are tried again, and how long it waits first."""

    retries: int = 0
    delay: float = DEFAULT_DELAY_SECONDS

    def first_fields(self) -> dict[str, Any]:
        """The status fields of attempt 1; none without retries (seed-shaped statuses)."""
        if not self.retries:
            return {}
        return {"attempt": 1, "retries": self.retries, "retry_delay_seconds": self.delay}


def check_policy(retries: object, delay: object) -> RetryPolicy:
    """The policy of ``retries`` and ``delay``; :class:`InvalidInput` when one is not a
    number within its bounds."""
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_RETRIES:
        raise InvalidInput(
            f"retries must be a whole number from 0 to {MAX_RETRIES}, not {retries!r}"
        )
    if (
        isinstance(delay, bool)
        or not isinstance(delay, (int, float))
        or not 0 <= delay <= MAX_DELAY_SECONDS
    ):
        raise InvalidInput(
            f"retry_delay_seconds must be a number from 0 to {MAX_DELAY_SECONDS:g}, not {delay!r}"
        )
    return RetryPolicy(retries, float(delay))


def resolve_policy(task_cls: type, retries: object = None, delay: object = None) -> RetryPolicy:
    """A submit's ``retries`` and ``delay`` where given, else the task class's defaults
    (``retries`` and ``retry_delay_seconds`` class attributes); :class:`InvalidInput` out
    of bounds."""
    if retries is None:
        retries = getattr(task_cls, "retries", 0)
    if delay is None:
        delay = getattr(task_cls, "retry_delay_seconds", DEFAULT_DELAY_SECONDS)
    return check_policy(retries, delay)
