"""Slow clients cannot hold a real server: 300 connections from one address sending a byte
a second, heads that never end, bodies that stop half way (api/slowclients.py).

The attacker is 127.0.0.1; the normal client comes from 127.0.0.2 (another loopback
address, as another host would), so the per-address cap is what keeps its way open.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from serverproc import ServerProcess, start_server

HEADER_SECONDS = 3.0
BODY_SECONDS = 3.0
PER_CLIENT = 64
SLOW_CLIENTS = 300
ANSWER_SECONDS = 1.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    config = {
        "header_timeout_seconds": HEADER_SECONDS,
        "body_timeout_seconds": BODY_SECONDS,
        "max_connections_per_client": PER_CLIENT,
    }
    proc = start_server(tmp_path_factory.mktemp("slow") / "srv", config=config)
    try:
        yield proc
    finally:
        proc.stop()


def address(server: ServerProcess) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def netloc(server: ServerProcess) -> str:
    return server.url.removeprefix("http://")


def other_client(server: ServerProcess) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    return httpx.Client(
        base_url=server.url, headers=server.headers, timeout=10, transport=transport
    )


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (it may have said 408 first)."""
    sock.setblocking(False)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


class Slowloris:
    """``count`` connections that each send a request head one byte a second, until stopped."""

    def __init__(self, server: ServerProcess, count: int) -> None:
        self.socks: list[socket.socket] = []
        for _ in range(count):
            sock = socket.create_connection(address(server), timeout=5)
            sock.sendall(f"GET /health HTTP/1.1\r\nHost: {netloc(server)}\r\n".encode())
            self.socks.append(sock)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._drip, daemon=True)
        self.thread.start()

    def _drip(self) -> None:
        while not self.done.wait(1.0):
            for sock in self.socks:
                with contextlib.suppress(OSError):  # the server closed it
                    sock.send(b"X")

    def open_count(self) -> int:
        return sum(not closed_by_server(sock) for sock in self.socks)

    def close(self) -> None:
        self.done.set()
        self.thread.join(5)
        for sock in self.socks:
            sock.close()


def timed(client: httpx.Client, method: str, path: str, **kw: object) -> float:
    started = time.monotonic()
    reply = client.request(method, path, **kw)  # type: ignore[arg-type]
    took = time.monotonic() - started
    assert reply.status_code == 200, reply.text
    return took


def test_a_byte_a_second_from_300_clients_does_not_keep_others_out(server: ServerProcess) -> None:
    slow = Slowloris(server, SLOW_CLIENTS)
    try:
        time.sleep(1.5)  # a byte or two each
        held = slow.open_count()
        assert held <= PER_CLIENT, f"{held} connections from one address held open"
        with other_client(server) as client:
            for _ in range(3):
                assert timed(client, "GET", "/health") < ANSWER_SECONDS
                took = timed(client, "POST", "/jobs/list_task_ids", json={"arguments": {}})
                assert took < ANSWER_SECONDS
        deadline = time.monotonic() + HEADER_SECONDS + 3.0
        while slow.open_count() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert slow.open_count() == 0, "heads still unfinished are held past the deadline"
    finally:
        slow.close()
    # the address is free again once its connections are gone
    with socket.create_connection(address(server), timeout=5) as sock:
        sock.sendall(f"GET /health HTTP/1.1\r\nHost: {netloc(server)}\r\n\r\n".encode())
        assert sock.recv(64).startswith(b"HTTP/1.1 200")


def test_an_unfinished_head_needs_no_token_to_be_dropped(server: ServerProcess) -> None:
    with socket.create_connection(address(server), timeout=HEADER_SECONDS + 5) as sock:
        started = time.monotonic()
        sock.sendall(f"POST /jobs/status HTTP/1.1\r\nHost: {netloc(server)}\r\nX-Slow: ".encode())
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert HEADER_SECONDS - 0.5 < took < HEADER_SECONDS + 2.0


def test_a_connection_that_sends_nothing_is_dropped(server: ServerProcess) -> None:
    with socket.create_connection(address(server), timeout=HEADER_SECONDS + 5) as sock:
        started = time.monotonic()
        assert sock.recv(4096).startswith(b"HTTP/1.1 408")
        assert time.monotonic() - started < HEADER_SECONDS + 2.0


def test_a_body_that_stops_half_way_gets_408(server: ServerProcess) -> None:
    head = (
        f"POST /jobs/status HTTP/1.1\r\nHost: {netloc(server)}\r\n"
        f"Authorization: Bearer {server.token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    )
    with socket.create_connection(address(server), timeout=BODY_SECONDS + 10) as sock:
        sock.sendall(head.encode() + b'{"arguments": {"task_id": "')
        started = time.monotonic()
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert BODY_SECONDS - 0.5 < took < BODY_SECONDS + 2.0


def test_a_slow_body_that_keeps_moving_is_read_whole(server: ServerProcess) -> None:
    """The body deadline is on silence, not on the whole body: a trickle past it is fine."""
    body = b'{"arguments": {"task_id": "no.pe"}}'
    head = (
        f"POST /jobs/status HTTP/1.1\r\nHost: {netloc(server)}\r\n"
        f"Authorization: Bearer {server.token}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    pieces = [body[i : i + 6] for i in range(0, len(body), 6)]
    pause = (BODY_SECONDS + 1.0) / len(pieces)  # the whole takes longer than the deadline
    with socket.create_connection(address(server), timeout=20) as sock:
        sock.sendall(head.encode())
        for piece in pieces:
            time.sleep(pause)
            sock.sendall(piece)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert b"Invalid task id 'no.pe'" in answer, answer  # the whole body was read
