"""Retrying the API server's transient failures: 429, 5xx and lost connections.

    policy = RetryPolicy(attempts=5, base_seconds=0.5, max_seconds=30)
    answer = policy.call(lambda: send(), transient=is_transient)

Waits grow exponentially with full jitter (a random wait up to the exponential bound, so
many clients do not retry in step), honour the server's ``Retry-After`` when it sends one,
and stop after ``attempts`` retries or once ``max_seconds`` have passed in total, whichever
comes first; the last failure is then raised as it was.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class Transient(Exception):
    """A failure worth retrying; ``cause`` is raised when the retries run out."""

    def __init__(self, cause: Exception, retry_after: float | None = None) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.retry_after = retry_after


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (only the delta-seconds form: the API server's)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    base_seconds: float = 0.5
    max_seconds: float = 30.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def delay(self, retry: int, retry_after: float | None) -> float:
        """The wait before retry number ``retry`` (0-based)."""
        if retry_after is not None:
            return retry_after
        return random.uniform(0, self.base_seconds * (2**retry))

    def call(self, send: Callable[[], T]) -> T:
        """``send()``, retried while it raises :class:`Transient` and the budget lasts."""
        started = time.monotonic()
        retry = 0
        while True:
            try:
                return send()
            except Transient as failure:
                wait = self.delay(retry, failure.retry_after)
                spent = time.monotonic() - started
                if retry >= self.attempts or spent + wait > self.max_seconds:
                    raise failure.cause from failure.cause.__cause__
                retry += 1
                self.sleep(wait)
