"""submit(name=, sources=), wait(handle, timeout=) and paged listings against a real server."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from runyard.client import AsyncClient, Client, Page
from runyard.errors import WaitTimeout
from serverproc import ServerProcess


def test_submit_names_sources_and_pages(server: ServerProcess) -> None:
    with Client(server.url, server.token) as client:
        first = client.submit("demo", name="pa", x=1, y=1)
        second = client.submit("demo", task_name="pb", x=2, y=2)  # the older spelling
        assert (first.task_id, second.task_id) == ("base#demo#pa", "base#demo#pb")
        with pytest.raises(TypeError, match="name="):
            client.submit("demo", name="one", task_name="two")
        child = client.submit("demo", sources=[first.task_id, second.task_id], x=0, y=0)
        for handle in (first, second, child):
            assert client.wait(handle, timeout=60).state == "succeeded"
        parents = {e.from_ for e in client.get_task_graph(child.task_id).edges}
        assert parents == {first.task_id, second.task_id}

        page = client.list_task_statuses(limit=2)
        assert isinstance(page, Page) and len(page) == 2 and page.next_cursor
        rest = client.list_tasks(limit=2, cursor=page.next_cursor)
        assert len(rest) == 1 and rest.next_cursor is None
        every = [s.task_id for s in page + rest]
        assert sorted(every) == sorted({first.task_id, second.task_id, child.task_id})
        # a bounded look: an iterator that ignored the cursor would repeat the first page
        walked = [s.task_id for s in itertools.islice(client.iter_tasks(page_size=1), 10)]
        assert walked == every


def test_waits_end_at_their_timeout(server: ServerProcess) -> None:
    with Client(server.url, server.token) as client:
        slow = client.submit("command", name="slow", command="sleep 30")
        began = time.monotonic()
        with pytest.raises(WaitTimeout, match="still running after 0.5 s"):
            client.wait(slow, timeout=0.5)
        with pytest.raises(WaitTimeout):
            client.wait_task(slow.task_id, slow.run_id, timeout=0.3)
        assert time.monotonic() - began < 10
        assert client.status(slow.task_id).state in ("queued", "running")

        async def wait_async() -> None:
            async with AsyncClient(server.url, server.token) as aclient:
                with pytest.raises(WaitTimeout):
                    await aclient.wait(slow, timeout=0.3)
                pages = [s.task_id async for s in aclient.iter_tasks(page_size=1)]
                assert pages == [slow.task_id]

        asyncio.run(wait_async())
        assert client.cancel(slow.task_id) is True
        assert client.wait(slow, timeout=30).state == "cancelled"
