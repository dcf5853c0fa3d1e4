"""The Client's Job API calls over kept-alive plain connections (:mod:`runyard.client.plain`):
one connection carries call after call; one the server closed while idle is never used; one
whose call failed or timed out is never used again (its late answer would be read as the
next call's); threads share them without mixing answers; a keyed submit whose answer was
lost is sent again on a fresh connection and runs once.

Each test puts a loopback TCP proxy (:mod:`tcpproxy`) between a Client and a real server.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from runyard.client import Client
from runyard.errors import WaitTimeout
from serverproc import ServerProcess
from tcpproxy import Proxy


@pytest.fixture
def proxy(server: ServerProcess) -> Iterator[Proxy]:
    forwarding = Proxy(int(server.url.rsplit(":", 1)[1]))
    yield forwarding
    forwarding.stop()


def test_call_after_call_goes_over_one_connection(server: ServerProcess, proxy: Proxy) -> None:
    with Client(proxy.url, server.token) as client:
        handle = client.submit("demo", name="kept", x=2, y=3)
        assert client.wait(handle, timeout=60).result["result"] == 5
        for _ in range(10):
            assert client.status(handle.task_id).run_id == handle.run_id
        assert client.list_task_ids() == [handle.task_id]
    assert proxy.connections == 1


def test_a_connection_closed_while_idle_is_not_used(server: ServerProcess, proxy: Proxy) -> None:
    """The server closed it (its keep-alive timeout, a restart): a status call, which is
    never sent twice, still gets its answer, over a new connection."""
    with Client(proxy.url, server.token) as client:
        handle = client.submit("demo", name="idle", x=1, y=1)
        client.wait(handle, timeout=60)
        proxy.close_all()
        time.sleep(0.1)  # the close reaches the client's socket
        assert client.status(handle.task_id).state == "succeeded"
        assert proxy.connections == 2


def test_a_call_that_timed_out_leaves_its_connection(server: ServerProcess, proxy: Proxy) -> None:
    """A wait that ran out of time: its answer may still come on that connection, so the
    next call goes over another, and gets its own answer."""
    with Client(proxy.url, server.token) as client, Client(server.url, server.token) as aside:
        handle = client.submit("command", name="slow", command="sleep 3", shell=True)
        deadline = time.monotonic() + 30
        while aside.status(handle.task_id).state != "running":  # not through the proxy
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with pytest.raises(WaitTimeout):
            client.wait(handle, timeout=0.3)
        before = proxy.connections
        status = client.status(handle.task_id)
        assert (status.task_id, status.state) == (handle.task_id, "running")
        assert proxy.connections == before + 1
        assert client.wait(handle, timeout=60).state == "succeeded"


def test_threads_share_the_connections_without_mixing_answers(
    server: ServerProcess, proxy: Proxy
) -> None:
    with Client(proxy.url, server.token) as client:
        handles = [client.submit("demo", name=f"t{i}", x=i, y=0) for i in range(8)]
        for handle in handles:
            client.wait(handle, timeout=60)

        def ask(index: int) -> list[tuple[str, int]]:
            handle = handles[index % len(handles)]
            answers = [client.status(handle.task_id) for _ in range(20)]
            return [(status.task_id, status.result["result"]) for status in answers]

        with ThreadPoolExecutor(8) as pool:
            for index, answers in enumerate(pool.map(ask, range(16))):
                assert set(answers) == {(f"base#demo#t{index % 8}", index % 8)}
    assert proxy.connections <= 8


def test_a_keyed_submit_whose_answer_was_lost_runs_once(server: ServerProcess) -> None:
    """The submit reached the server and its answer was lost with the connection: the
    Client sends it again, with the same Idempotency-Key, over a new connection, and the
    server answers the task it made the first time."""
    losing = Proxy(int(server.url.rsplit(":", 1)[1]), cut_first_after=0)
    try:
        with Client(losing.url, server.token) as client:
            handle = client.submit("demo", name="lost", x=4, y=4)
            assert client.wait(handle, timeout=60).result["result"] == 8
            assert client.list_task_ids() == [handle.task_id]
        assert losing.connections == 2
    finally:
        losing.stop()
