"""uvicorn's HTTP protocol with a response's head and its first body part sent in one write.

uvicorn writes a response's status line and headers as soon as the app starts the answer,
and its body when the app sends it: two socket writes, two packets, two wake-ups of the
client, for answers of a few hundred bytes (a ``status`` call spends about a third of the
server's time in them). Here the head waits for the body part that follows it in the same
turn of the event loop and both go in one write (up to 64 KiB of body); a head with no body
part in that turn (a stream whose first event is not ready) goes at the end of the turn,
alone, as before.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

RESPONSE_HEAD = b"HTTP/"
JOINED_BODY_MAX = 64 * 1024  # a larger first part goes after the head, not copied onto it


class CoalescingTransport(asyncio.Transport):
    """A transport that holds a response head (a write starting ``HTTP/``) until the next
    write or the end of the loop's turn, whichever comes first; everything else passes."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._head: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._head is not None and len(data) <= JOINED_BODY_MAX:
            data = self._head + bytes(data)
            self._head = None
        elif self._head is not None:
            self.flush()
        elif bytes(data[:5]) == RESPONSE_HEAD:
            self._head = bytes(data)
            self._loop.call_soon(self.flush)
            return
        self._transport.write(data)

    def flush(self) -> None:
        if self._head is not None:
            head, self._head = self._head, None
            if not self._transport.is_closing():
                self._transport.write(head)

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._head = None
        self._transport.abort()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._head or b"")

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()


class OneWriteHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a :class:`CoalescingTransport`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))
