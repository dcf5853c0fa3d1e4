"""Start-up in the background: the port opens at once, whatever the workspace holds.

(Before the app itself is built, api/front.py answers the port; this module is the next
step, once it runs.)

Building the index reads every task folder (seconds at 100,000 tasks). The server starts
its services in a thread of their own and listens meanwhile; the order inside stays what
it was: the index is built, then the supervisor reconciles the unfinished tasks (from the
files) and launches what is queued, then the agent-run service sweeps and adopts its runs.

Until that is done, :class:`StartupGate` lets through only what needs none of it:
``/health`` (which shows ``indexing: {done, total}``), the Studio's and the docs' files, the
job catalogue and the single-task reads answered from the task's own files (``status``,
``wait_task``, ``read_task_log``, ``stream_task``, the definitions). Everything else --
lists, graph and context (the index), submit, cancel, delete (the supervisor), the agent
API and MCP -- waits for the start-up up to :data:`WAIT_SECONDS`, then is answered 503 with
``Retry-After`` (the :class:`ServiceUnavailable` rows of the error table): a Job API
envelope on ``/jobs``, ``{"error": {code, message}}`` elsewhere (MCP and metrics included).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Receive, Scope, Send

from runyard.errors import ServiceUnavailable

if TYPE_CHECKING:  # api/front.py answers with this module before the app is imported
    from starlette.responses import Response

    from runyard.api.services import Services

log = logging.getLogger("runyard.api")

WAIT_SECONDS = 10.0
# answered from the task's own files (or from nothing), never from the index
READS_WITHOUT_INDEX = frozenset(
    f"/jobs/{name}{suffix}"
    for name in (
        "status",
        "wait_task",
        "read_task_log",
        "stream_task",
        "list_installed_task_definitions",
        "get_task_definition",
    )
    for suffix in ("", "/events")
)
# the login routes need no index: a sign-in during a long start-up is not held back
OPEN_PATHS = frozenset({"/health", "/jobs", "/", "/index.html", "/favicon.svg", "/docs",
                        "/api/v1/login", "/api/v1/login/codes", "/api/v1/logout"})  # fmt: skip
OPEN_PREFIXES = ("/css/", "/js/", "/docs/")


class Startup:
    """``services.start()`` in a thread; ``ready`` once it returned."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._then: list[Callable[[], None]] = []

    def when_ready(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (in the start-up's thread) once the start-up is over; before
        :meth:`begin`."""
        self._then.append(callback)

    def begin(self) -> None:
        self._thread = threading.Thread(target=self._run, name="runyard-start", daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait for the start-up to end (before the services are stopped)."""
        if self._thread is not None:
            self._thread.join()

    def indexing(self) -> dict[str, int] | None:
        """``{"done", "total"}`` folders of the first index until the start-up is over (it
        shows ``done == total`` while the supervisor reconciles), then None."""
        if self.ready.is_set():
            return None
        done, total = self.services.repository.progress
        return {"done": done, "total": total}

    async def wait(self, timeout: float = WAIT_SECONDS) -> bool:
        if self.ready.is_set():
            return True
        return await asyncio.to_thread(self.ready.wait, timeout)

    def _run(self) -> None:
        try:
            self.services.start()
        except BaseException:
            # what failing before listening did: the server ends, the reason in its log
            log.exception("the server could not start its services; stopping")
            os.kill(os.getpid(), signal.SIGTERM)
            return
        self.ready.set()
        for callback in self._then:
            callback()


class StartupGate:
    """Holds back what needs the started services (see the module docstring)."""

    def __init__(self, app: ASGIApp, startup: Startup) -> None:
        self.app = app
        self.startup = startup

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.startup.ready.is_set():
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if _needs_nothing(path) or await self.startup.wait():
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1013})  # try again later
            return
        await unavailable(path)(scope, receive, send)


def _needs_nothing(path: str) -> bool:
    return path in OPEN_PATHS or path in READS_WITHOUT_INDEX or path.startswith(OPEN_PREFIXES)


def unavailable(path: str, doing: str = "building its task index") -> Response:
    """The answer to a request that waited for the start-up in vain."""
    from runyard.api.errormap import api_error_response, job_error_response

    exc = ServiceUnavailable(f"The server is starting ({doing}); retry shortly")
    if path.startswith("/jobs/"):
        return job_error_response(exc)
    return api_error_response(exc)
