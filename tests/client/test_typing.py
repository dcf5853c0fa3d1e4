"""The client's types as a type checker sees them: coroutines for AsyncClient, iterators for
streams, typed answers; and a wrong use is caught (so the client is not ``Any``)."""

from __future__ import annotations

from pathlib import Path

from mypy import api

GOOD = """
from collections.abc import AsyncIterator, Iterator
from typing import assert_type

from runyard.client import AsyncClient, Client, Page, Run, StreamEvent, TaskHandle, TaskStatus


async def use_async(client: AsyncClient) -> None:
    assert_type(await client.status("t"), TaskStatus)
    assert_type(await client.submit("demo", name="n", x=1), TaskHandle)
    assert_type(await client.list_task_statuses(limit=1), Page[TaskStatus])
    assert_type(client.stream("t"), AsyncIterator[StreamEvent])
    assert_type(client.iter_tasks(), AsyncIterator[TaskStatus])
    assert_type(await client.agents.wait_run("r", timeout=1.0), Run)
    assert_type(client.agents.iter_runs(), AsyncIterator[Run])


def use_sync(client: Client) -> None:
    assert_type(client.wait(client.submit("demo"), timeout=1.0), TaskStatus)
    assert_type(client.stream("t"), Iterator[StreamEvent])
    assert_type(client.agents.wait_run("r", timeout=1.0), Run)
    assert_type(client.agents.answer("r"), str | None)
"""

BAD = """
from runyard.client import AsyncClient


async def forgets_await(client: AsyncClient) -> str:
    status = client.status("t")
    return status.state
"""


def test_a_type_checker_sees_the_clients_types(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "none.ini").write_text("[mypy]\n")
    out, err, code = api.run([
        str(tmp_path / "good.py"), str(tmp_path / "bad.py"), "--no-incremental",
        "--cache-dir", str(tmp_path / "cache"), "--python-version", "3.11",
        "--config-file", str(tmp_path / "none.ini"),
    ])  # fmt: skip
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert errors and all(line.startswith(str(tmp_path / "bad.py")) for line in errors), out + err
    assert "Coroutine" in out
