"""Slow clients cannot hold the server: header and body deadlines, and a cap per address.

uvicorn (its httptools protocol, which serve uses) closes an idle keep-alive connection
after ``timeout_keep_alive``, but a connection that sends nothing, or a request head one
byte a second, or a body that stops half way, it holds for as long as the client likes,
before any token is looked at. A few hundred of those would use up the server's
descriptors. Here, per connection:

* **header deadline**: a request's head (request line and headers) must be complete within
  ``header_timeout_seconds`` of the connection opening or of the request's first byte; a
  byte now and then does not extend it. Past it: ``408`` and the connection is closed.
* **body inactivity**: once the head is in, each piece of body must come within
  ``body_timeout_seconds`` of the one before (uploads are streamed, so a long upload that
  keeps moving is fine; time while the server itself has paused reading does not count).
  Past it: ``408`` if no answer was started, and the connection is closed.
* **connections per client address**: past ``max_connections_per_client`` open TCP
  connections from one address, a new one is closed at once. The agent-run Unix socket
  has no addresses to tell runs apart (runs are bounded by ``max_concurrent_runs``); its
  deadlines are the same.

>>> config = uvicorn.Config(app, http=guarded_protocol(settings))
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

from runyard.api.onewrite import OneWriteHttpProtocol
from runyard.config import Settings

log = logging.getLogger("runyard.api")

TIMEOUT_ANSWER = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 16\r\nconnection: close\r\n\r\nrequest timeout\n"
)


def guarded_protocol(settings: Settings) -> type[GuardedHttpProtocol]:
    """The protocol class for one server (one listener): its own count of connections."""
    return type(
        "GuardedHttpProtocol",
        (GuardedHttpProtocol,),
        {
            "header_seconds": settings.header_timeout_seconds,
            "body_seconds": settings.body_timeout_seconds,
            "max_per_client": settings.max_connections_per_client,
            "open_by_address": Counter(),
        },
    )


class GuardedHttpProtocol(OneWriteHttpProtocol):
    """uvicorn's HTTP protocol with the deadlines and the cap of the module docstring; the
    class attributes are set per server by :func:`guarded_protocol`."""

    header_seconds: float
    body_seconds: float
    max_per_client: int
    open_by_address: Counter[str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._address: str | None = None  # counted against the cap
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        address = _client_address(transport)
        if address is not None:
            if self.open_by_address[address] >= self.max_per_client:
                self._refused = True
                log.debug("refused a connection from %s: %d open", address, self.max_per_client)
                transport.abort()
                return
            self.open_by_address[address] += 1
            self._address = address
        super().connection_made(transport)
        self._arm(self.header_seconds, self._head_late)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self._disarm()
        if self._address is not None:
            self.open_by_address[self._address] -= 1
            if self.open_by_address[self._address] <= 0:
                del self.open_by_address[self._address]
            self._address = None
        super().connection_lost(exc)

    # parser callbacks: the clock each part of a request runs on
    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:  # a connection's first request: counted from the connect
            self._arm(self.header_seconds, self._head_late)

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()
        self._arm(self.body_seconds, self._body_late)

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        self._arm(self.body_seconds, self._body_late)

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def _arm(self, seconds: float, late: Any) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _head_late(self) -> None:
        self._deadline = None
        self._time_out()

    def _body_late(self) -> None:
        self._deadline = None
        if self.flow is not None and self.flow.read_paused:  # the server is the slow one
            self._arm(self.body_seconds, self._body_late)
            return
        cycle = self.cycle
        if cycle is not None and cycle.response_started:
            self.transport.close()  # an answer is under way: no 408 to add to it
        else:
            self._time_out()
        if cycle is not None:  # the app reads a disconnect and its answer is dropped
            cycle.disconnected = True
            cycle.message_event.set()

    def _time_out(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(TIMEOUT_ANSWER)
            self.transport.close()


def _client_address(transport: asyncio.BaseTransport) -> str | None:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return None  # a Unix socket: no address
