"""A server that cannot be reached is named with a plain reason: no httpx class name, no
errno, no repr of an exception, from the job client, the agents client and the async one."""

from __future__ import annotations

import asyncio
import socket

import pytest

from runyard.client import AsyncClient, Client
from runyard.errors import ServerUnreachable


def closed_port() -> int:
    # bound and closed again: nothing listens there, so a connect is refused at once
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def plain(message: str, url: str) -> None:
    assert message == f"Cannot reach runyard at {url}: connection refused", message
    for internal in ("Error", "Errno", "httpx", "(", "["):
        assert internal not in message


def test_a_refused_connection_reads_as_one_plain_sentence() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with Client(url, "token") as client:
        with pytest.raises(ServerUnreachable) as jobs:
            client.list_task_ids()
        plain(str(jobs.value), url)
        with pytest.raises(ServerUnreachable) as agents:
            client.agents.list_sessions()
        plain(str(agents.value), url)


def test_the_async_client_says_the_same() -> None:
    url = f"http://127.0.0.1:{closed_port()}"

    async def ask() -> None:
        async with AsyncClient(url, "token") as client:
            with pytest.raises(ServerUnreachable) as jobs:
                await client.list_task_ids()
            plain(str(jobs.value), url)

    asyncio.run(ask())
