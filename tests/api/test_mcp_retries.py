"""MCP's wait_task on a task with retries follows it from its first attempt's run id to its
last, and a wait whose time runs out during a retry's wait answers the waiting attempt.
Driven by the MCP SDK's own client against a real server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from serverproc import ServerProcess, start_server

# counts its attempts in a file; fails before attempt {ok}
FLAKY = "n=$(( $(cat {counter} 2>/dev/null || echo 0) + 1 )); echo $n > {counter}; [ $n -ge {ok} ]"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path / "srv")
    try:
        yield proc
    finally:
        proc.stop()


@asynccontextmanager
async def session_of(server: ServerProcess) -> AsyncIterator[ClientSession]:
    headers = {"authorization": f"Bearer {server.token}"} if server.token else {}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(server.url + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def wait_over_mcp(server: ServerProcess, **arguments: Any) -> dict[str, Any]:
    async def scenario() -> dict[str, Any]:
        async with session_of(server) as session:
            result = await session.call_tool("wait_task", arguments)
            assert result.structured_content is not None, result
            return result.structured_content

    return anyio.run(scenario)


def flaky(server: ServerProcess, counter: Path, ok: int, delay: float) -> dict[str, Any]:
    return server.call(
        "submit", task="command", shell=True, command=FLAKY.format(counter=counter, ok=ok),
        retries=2, retry_delay_seconds=delay,
    )["answer"]  # fmt: skip


def test_a_wait_from_the_first_attempt_answers_the_last(
    server: ServerProcess, tmp_path: Path
) -> None:
    handle = flaky(server, tmp_path / "tries", ok=2, delay=0.2)
    waited = wait_over_mcp(server, task_id=handle["task_id"], run_id=handle["run_id"], timeout=60)
    answer = waited["answer"]
    assert waited["success"] is True and answer["state"] == "succeeded", waited
    assert answer["attempt"] == 2 and answer["retry_of"] == handle["run_id"]


def test_a_wait_that_runs_out_during_a_retry_wait_answers_the_waiting_attempt(
    server: ServerProcess, tmp_path: Path
) -> None:
    handle = flaky(server, tmp_path / "tries", ok=99, delay=60)
    try:
        waited = wait_over_mcp(
            server, task_id=handle["task_id"], run_id=handle["run_id"], timeout=3
        )
    finally:
        server.call("cancel", task_id=handle["task_id"])
    answer = waited["answer"]
    assert waited["success"] is True and waited["metadata"] == {"timed_out": True}, waited
    assert answer["state"] == "queued" and answer["attempt"] == 2, answer
    assert answer["queued_reason"].startswith("retry: attempt 2 of 3")
