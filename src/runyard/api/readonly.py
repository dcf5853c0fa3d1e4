"""Read-only mode: a server whose disk is full still starts, serves reads and frees space.

``serve`` writes records as it starts: ``server.json`` (its address and token), the agent
store's shared memory file. On a full disk (ENOSPC, EDQUOT: :func:`is_space_error`) such a
write fails; instead of ending, the server starts read-only and says so (its banner, a
warning in its log). Read-only, it answers every read (status, lists, logs, files), cancels
and deletes (deleting is how space comes back), and answers 507 to whatever would create
something (submits, sessions, runs, uploads, received tasks) with a message that says why.

Each write that failed is kept with the function that makes it again; a thread calls them
every :data:`RETRY_SECONDS`, in the order they failed, and once all of them have succeeded
the server leaves read-only mode by itself and logs it.

>>> read_only = ReadOnly()
>>> read_only.defer("server.json", lambda: write_server_file(path, record), exc)
>>> read_only.refuse("submit a task")   # InsufficientStorage while anything is deferred
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from runyard.errors import InsufficientStorage
from runyard.workspace.space import is_space_error

log = logging.getLogger("runyard.api")

RETRY_SECONDS = 1.0


class ReadOnly:
    """Whether the server is read-only, why, and the writes it retries to leave it."""

    def __init__(self, retry_seconds: float = RETRY_SECONDS) -> None:
        self.retry_seconds = retry_seconds
        self._lock = threading.Lock()
        self._deferred: dict[str, Callable[[], object]] = {}
        self._reason = ""
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        with self._lock:
            return bool(self._deferred)

    @property
    def reason(self) -> str:
        """Why the server is read-only ("" when it is not)."""
        with self._lock:
            return self._reason if self._deferred else ""

    def defer(self, what: str, write: Callable[[], object], exc: BaseException) -> None:
        """``what`` could not be written (``exc``, a space error): read-only until ``write()``
        succeeds. Any other error is raised again: only a full disk makes a server read-only."""
        if not is_space_error(exc):
            raise exc
        with self._lock:
            first = not self._deferred
            self._deferred[what] = write
            if first:
                self._reason = f"the disk is full ({what} could not be written: {exc})"
        log.warning("read-only: %s could not be written (%s); the server serves reads, cancel "
                    "and delete, and refuses new work until space is freed", what, exc)  # fmt: skip
        self._start()

    def refuse(self, doing: str = "create new work") -> None:
        """Raise :class:`InsufficientStorage` (507) while the server is read-only."""
        reason = self.reason
        if reason:
            raise InsufficientStorage(
                f"The server is read-only: {reason}. It cannot {doing} until space is freed "
                "(deleting finished tasks frees it); it leaves read-only mode by itself"
            )

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)

    def retry_now(self) -> bool:
        """Make every deferred write again, in order, stopping at the first that fails;
        True once none is left (the server is writable)."""
        with self._lock:
            pending = list(self._deferred.items())
        for what, write in pending:
            try:
                write()
            except Exception as exc:
                if not is_space_error(exc):
                    log.exception("read-only: writing %s again failed", what)
                return False
            with self._lock:
                self._deferred.pop(what, None)
                left = bool(self._deferred)
            log.warning("space is back: %s written%s", what,
                        "" if left else "; the server leaves read-only mode")  # fmt: skip
        return True

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="runyard-readonly", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(self.retry_seconds):
            if not self.retry_now():
                continue
            with self._lock:
                if not self._deferred:  # else deferred meanwhile: this thread goes on
                    self._thread = None
                    return


def read_only_banner(reason: str, url: str, token_source: str) -> str:
    """The lines ``serve`` adds to its banner when it starts read-only: why, what works, and
    how a client connects while ``server.json`` cannot tell it."""
    return (
        f"  READ-ONLY: {reason}.\n"
        "  Reads, cancel and delete work; new work answers 507 until space is freed, then\n"
        "  the server leaves read-only mode by itself.\n"
        f"  Clients: RUNYARD_URL={url}{token_source}.\n"
    )
