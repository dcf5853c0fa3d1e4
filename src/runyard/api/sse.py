"""Count open Server-Sent-Event streams for ``/metrics`` without a handle to the server.

The metrics middleware puts the request's gauge into a context variable; a stream's body
iterator runs in a task that inherits that context, so the generators of both stream kinds
(:mod:`runyard.api.streaming`, :mod:`runyard.agents.stream`) just wrap their loop::

    with sse_client("task"):
        ...  # yield events

Outside a server (no middleware, e.g. a generator driven by a test) it does nothing. This
module imports nothing of runyard's, so the agent side can use it without a cycle.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

current_gauge: ContextVar[Any] = ContextVar("runyard_sse_clients", default=None)


@contextmanager
def sse_client(stream: str) -> Iterator[None]:
    """Count the block as one open stream of kind ``stream`` (``task`` or ``run``)."""
    gauge = current_gauge.get()
    if gauge is None:
        yield
        return
    child = gauge.labels(stream=stream)
    child.inc()
    try:
        yield
    finally:
        child.dec()
