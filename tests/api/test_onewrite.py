"""A response's head and its first body part leave in one write; a head alone leaves at the
end of the loop's turn; a large body and a close keep the order of the bytes."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

from runyard.api.onewrite import JOINED_BODY_MAX, CoalescingTransport

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"
Check = Callable[[CoalescingTransport, socket.socket], Awaitable[None]]


def sent(peer: socket.socket) -> bytes:
    """What has arrived so far (up to the end of the stream, if closed)."""
    peer.setblocking(False)
    parts = []
    while True:
        try:
            part = peer.recv(1 << 20)
        except BlockingIOError:
            break
        if not part:
            break
        parts.append(part)
    return b"".join(parts)


def run(check: Check) -> None:
    async def main() -> None:
        ours, peer = socket.socketpair()
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
        try:
            await check(CoalescingTransport(transport, loop), peer)  # type: ignore[arg-type]
        finally:
            transport.close()
            peer.close()

    asyncio.run(main())


class Writes:
    """The real transport's writes, counted (the wrapper's own are what is under test)."""

    def __init__(self, wrapper: CoalescingTransport) -> None:
        self.calls: list[bytes] = []
        inner = wrapper._transport
        real = inner.write

        def write(data: bytes | bytearray | memoryview) -> None:
            self.calls.append(bytes(data))
            real(data)

        inner.write = write  # type: ignore[method-assign]


def test_head_and_small_body_go_in_one_write() -> None:
    async def check(transport: CoalescingTransport, peer: socket.socket) -> None:
        writes = Writes(transport)
        transport.write(HEAD)
        transport.write(b"{}")
        assert writes.calls == [HEAD + b"{}"]
        await asyncio.sleep(0.05)
        assert sent(peer) == HEAD + b"{}"
        assert writes.calls == [HEAD + b"{}"]  # nothing left to flush

    run(check)


def test_a_head_alone_leaves_at_the_end_of_the_turn() -> None:
    async def check(transport: CoalescingTransport, peer: socket.socket) -> None:
        writes = Writes(transport)
        transport.write(HEAD)
        assert writes.calls == []
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert writes.calls == [HEAD]
        await asyncio.sleep(0.05)
        assert sent(peer) == HEAD
        transport.write(b"{}")  # a later body part passes at once
        assert writes.calls == [HEAD, b"{}"]

    run(check)


def test_a_large_body_follows_the_head_and_other_writes_pass() -> None:
    body = b"x" * (JOINED_BODY_MAX + 1)

    async def check(transport: CoalescingTransport, peer: socket.socket) -> None:
        writes = Writes(transport)
        transport.write(b"not a head")
        transport.write(HEAD)
        transport.write(body)
        assert writes.calls == [b"not a head", HEAD, body]
        assert transport.get_write_buffer_size() >= 0

    run(check)


def test_close_sends_a_held_head_first() -> None:
    async def check(transport: CoalescingTransport, peer: socket.socket) -> None:
        writes = Writes(transport)
        transport.write(HEAD)
        transport.close()
        assert writes.calls == [HEAD]
        assert transport.is_closing()
        await asyncio.sleep(0.05)
        assert sent(peer) == HEAD

    run(check)
