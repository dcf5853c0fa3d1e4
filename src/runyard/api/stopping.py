"""A stop that always ends: the server is gone within ``cancel_grace_seconds`` plus
:data:`STOP_MARGIN_SECONDS` of the first SIGTERM/SIGINT, whatever its requests and runs do.

Stopping has three steps, each bounded:

1. Every listener (TCP and the agent-run socket) stops accepting at once and gives the
   requests in flight :func:`drain_seconds` to finish, side by side (uvicorn's
   ``timeout_graceful_shutdown``); what is still running then (a ``wait_task``, an event
   stream) is cancelled and answered by :class:`CutShort`: a 503 ``stopping`` with
   ``Retry-After``, or the end of a stream already under way, instead of uvicorn's 500.
2. The app's shutdown (the supervisor and the agent backend stop watching; runs keep going,
   for the next server to adopt) and the event loop's close.
3. :class:`StopBound`: should anything in 2 not return (a thread stuck in a call, a task
   that does not take its cancellation), the server removes its address and its socket
   file, reaps its children and exits with status 1 at the bound, as a kill would; what it
   writes is crash-safe, so nothing is lost that a kill -9 would not lose.

Children that ended while it stopped (the supervisor no longer watches them) are reaped
before the process ends (:func:`reap_children`), so none is left a zombie on hosts whose
PID 1 does not reap orphans.

>>> bound = StopBound(settings.cancel_grace_seconds, leave=remove_files)
>>> bound.arm()  # on the first signal
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runyard.config import Settings
from runyard.errors import ServerStopping

log = logging.getLogger("runyard.api")

STOP_MARGIN_SECONDS = 3.0  # the app's shutdown and the loop's close, after the drain


def drain_seconds(settings: Settings) -> float:
    """How long requests in flight may go on once a stop begins."""
    return settings.cancel_grace_seconds


def reap_children() -> list[int]:
    """Collect every child of this process that has ended; those still running are left."""
    reaped = []
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # no children at all
            return reaped
        if pid == 0:  # children, none ended
            return reaped
        reaped.append(pid)


class StopBound:
    """Ends the process at ``grace + STOP_MARGIN_SECONDS`` after :meth:`arm` if it is
    still there, after ``leave()`` (the files a stopped server takes away)."""

    def __init__(self, grace: float, leave: Callable[[], None]) -> None:
        self.seconds = grace + STOP_MARGIN_SECONDS
        self._leave = leave
        self._armed = False

    @property
    def armed(self) -> bool:
        return self._armed

    def arm(self) -> None:
        """Start the clock (once; later calls do nothing)."""
        if self._armed:
            return
        self._armed = True
        threading.Thread(target=self._run, name="stop-bound", daemon=True).start()

    def _run(self) -> None:
        time.sleep(self.seconds)
        log.error(
            "the stop is taking longer than %.1f s (cancel_grace_seconds + %.0f s): exiting "
            "now; runs keep going for the next server",
            self.seconds,
            STOP_MARGIN_SECONDS,
        )
        try:
            self._leave()
        except Exception:
            log.exception("the stopped server's files could not all be removed")
        reap_children()
        logging.shutdown()  # flushed: the line above is the last one server.log gets
        sys.stdout.flush()
        os._exit(1)


class CutShort:
    """ASGI: a request the stop cancels (its drain ran out) gets an answer, not uvicorn's
    500 and traceback: a 503 ``stopping`` when nothing was sent yet, else the end of its
    body (an event stream ends as if done). Cancellation before the stop passes through."""

    def __init__(self, app: ASGIApp, stop: StopBound) -> None:
        self.app = app
        self.stop = stop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except asyncio.CancelledError:
            if not self.stop.armed:
                raise
            await _answer_cut(scope, receive, send, started)


async def _answer_cut(scope: Scope, receive: Receive, send: Send, started: bool) -> None:
    if started:
        with contextlib.suppress(RuntimeError):  # a body of announced length stays short
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    from runyard.api.errormap import api_error_response, job_error_response

    exc = ServerStopping("The server is stopping; retry once it is back")
    answer = job_error_response if scope["path"].startswith("/jobs/") else api_error_response
    await answer(exc)(scope, receive, send)
