"""The light reader of the task list (``runyard ls`` over HTTP) answers what the Client
answers, raises what it raises, and steps aside for TLS and proxies."""

from __future__ import annotations

import pytest
from test_unreachable import closed_port, plain

from runyard.client import Client
from runyard.client.plain import PlainClient, plain_reaches
from runyard.errors import ServerUnreachable, Unauthorized
from serverproc import ServerProcess


def test_a_page_is_the_clients_page_as_plain_json(server: ServerProcess) -> None:
    with Client(server.url, server.token) as client:
        for index in range(3):
            client.wait(client.submit("demo", name=f"p{index}", x=index, y=1), timeout=60)
        reader = PlainClient(server.url, server.token)
        assert reader.health()
        for query in ({}, {"state": "succeeded"}, {"text": "p1"}):
            expected = client.task_page(limit=2, **query)
            items, next_cursor, total = reader.task_page(limit=2, **query)
            assert items == [status.to_json() for status in expected]
            assert (next_cursor, total) == (expected.next_cursor, expected.total)
        first, cursor, _ = reader.task_page(limit=2)
        rest, after, _ = reader.task_page(limit=2, cursor=cursor)
        assert [item["task_id"] for item in first + rest] == [
            "base#demo#p2", "base#demo#p1", "base#demo#p0",
        ] and after is None  # fmt: skip


def test_its_errors_are_the_clients(server: ServerProcess) -> None:
    with pytest.raises(Unauthorized) as by_client, Client(server.url, "wrong") as client:
        client.task_page(limit=1)
    with pytest.raises(Unauthorized) as by_reader:
        PlainClient(server.url, "wrong").task_page(limit=1)
    assert str(by_reader.value) == str(by_client.value)
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(ServerUnreachable) as refused:
        PlainClient(url, "token").task_page(limit=1)
    plain(str(refused.value), url)
    assert not PlainClient(url, "token").health()


def test_tls_and_proxies_are_left_to_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert plain_reaches("http://127.0.0.1:8765")
    assert not plain_reaches("https://runyard.example.org")
    assert not plain_reaches("http://127.0.0.1:port") and not plain_reaches("127.0.0.1:8765")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example.org:3128")
    assert not plain_reaches("http://127.0.0.1:8765")
