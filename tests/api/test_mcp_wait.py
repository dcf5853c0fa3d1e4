"""MCP's wait_task is bounded and needs no run id; a running task's missing artifact is
"not written yet". Driven by the MCP SDK's own client against a real server."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from runyard.api.jobs import JOBS
from runyard.api.mcp.waiting import MAX_WAIT_SECONDS
from serverproc import ServerProcess, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("mcp-wait") / "srv")
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


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    response = result.structured_content
    assert response is not None
    assert result.is_error is (not response["success"])
    return response


def uri(task_id: str, rest: str) -> str:
    return f"runyard://tasks/{task_id.replace('#', '%23')}/{rest}"


def submit_sleeper(server: ServerProcess, command: str) -> dict[str, Any]:
    done = server.call("submit", task="command", command=command, shell=True)
    assert done["success"], done
    return done["answer"]


def test_a_wait_answers_the_current_status_when_its_timeout_passes(server: ServerProcess) -> None:
    handle = submit_sleeper(server, "sleep 60")

    async def scenario() -> tuple[dict[str, Any], float]:
        async with session_of(server) as session:
            began = time.monotonic()
            waited = await call(session, "wait_task", task_id=handle["task_id"], timeout=1.5)
            return waited, time.monotonic() - began

    try:
        waited, took = anyio.run(scenario)
    finally:
        server.call("cancel", task_id=handle["task_id"])
    assert waited["success"] is True and waited["metadata"] == {"timed_out": True}, waited
    assert waited["answer"]["state"] in ("queued", "running")
    assert waited["answer"]["run_id"] == handle["run_id"]  # the current run, none was named
    assert 1.4 <= took < 10, took


def test_a_wait_without_a_run_id_waits_for_the_current_run(server: ServerProcess) -> None:
    handle = submit_sleeper(server, "sleep 1; exit 3")

    async def scenario() -> dict[str, Any]:
        async with session_of(server) as session:
            return await call(session, "wait_task", task_id=handle["task_id"], timeout=60)

    waited = anyio.run(scenario)
    assert waited["success"] is False and waited["metadata"] == {}, waited
    assert waited["answer"]["state"] == "failed" and waited["answer"]["exit_code"] == 3
    assert waited["answer"]["run_id"] == handle["run_id"]


def test_the_timeout_is_bounded_and_the_run_checked(server: ServerProcess) -> None:
    handle = submit_sleeper(server, "true")
    server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])

    async def scenario() -> list[dict[str, Any]]:
        async with session_of(server) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            schema = tools["wait_task"].input_schema
            assert schema["required"] == ["task_id"]
            assert schema["properties"]["timeout"]["default"] == 60
            return (
                [
                    await call(session, "wait_task", task_id=handle["task_id"], timeout=too_long)
                    for too_long in (MAX_WAIT_SECONDS + 1, 0, -5)
                ]
                + [
                    await call(session, "wait_task", task_id=handle["task_id"], poll_interval=1e-9),
                    await call(session, "wait_task", task_id=handle["task_id"], poll_interval=1e6),
                ]
                + [
                    await call(session, "wait_task", task_id=handle["task_id"], run_id="another"),
                    await call(session, "wait_task", task_id=handle["task_id"], timeout=5),
                ]
            )

    *refused, other_run, done = anyio.run(scenario)
    for answer, field in zip(refused, ["timeout"] * 3 + ["poll_interval"] * 2, strict=True):
        assert answer["success"] is False and answer["answer"].startswith("ValidationError")
        assert field in answer["answer"], answer
    assert other_run["success"] is False and "another" in other_run["answer"], other_run
    assert done["success"] is True and done["metadata"] == {}
    assert done["answer"]["state"] == "succeeded"


def test_the_job_api_wait_keeps_its_contract() -> None:
    # the seed's wait_task: run_id required, no timeout (the client's waits need that)
    schema = JOBS["wait_task"].args.model_json_schema()
    assert "run_id" in schema["required"] and "timeout" not in schema["properties"]


def test_a_running_tasks_missing_artifact_is_not_written_yet(server: ServerProcess) -> None:
    handle = submit_sleeper(server, "sleep 60; echo late > report.md")
    task_id = handle["task_id"]

    async def read_error(session: ClientSession, path: str) -> str:
        with pytest.raises(MCPError) as caught:
            await session.read_resource(uri(task_id, f"artifacts/{path}"))
        return str(caught.value)

    async def scenario() -> tuple[str, str, str]:
        async with session_of(server) as session:
            running = await read_error(session, "report.md")
            nested = await read_error(session, "plots/roc.png")
            await call(session, "cancel", task_id=task_id)
            await call(session, "wait_task", task_id=task_id, timeout=30)
            ended = await read_error(session, "report.md")
            return running, nested, ended

    running, nested, ended = anyio.run(scenario)
    for message in (running, nested):
        assert "not written yet" in message and task_id in message, message
        assert "does not exist or is not a folder" not in message
    assert "ended cancelled without writing it" in ended, ended


def test_a_written_artifact_still_reads(server: ServerProcess) -> None:
    handle = submit_sleeper(server, "echo hello > note.txt")
    server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])

    async def scenario() -> str:
        async with session_of(server) as session:
            contents = await session.read_resource(uri(handle["task_id"], "artifacts/note.txt"))
            return contents.contents[0].text  # type: ignore[union-attr]

    assert anyio.run(scenario) == "hello\n"
