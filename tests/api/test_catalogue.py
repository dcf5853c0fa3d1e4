"""The job catalogue: GET /jobs, the MCP tools and client.call_job reach every job, the
AxonX ones included, and a run token sees and calls only what it may."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from runyard.api.catalogue import ADMIN_ONLY_JOBS
from runyard.api.compat_jobs import all_jobs
from runyard.client import AsyncClient, Client
from runyard.errors import HTTPError, JobFailed
from runyard.wire import TaskStatus
from serverproc import ServerProcess

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run  # noqa: E402

PAGES = {
    "online": {
        "title": {"en": "Online prediction", "zh": "在线预测"},
        "view": "pipeline",
        "category": "online_prediction",
    },
    "sync": {"title": {"en": "Synchronization", "zh": "同步"}, "view": "schedules"},
}
GATE = "needs the server (admin) token; a run token may not call it"


@pytest.fixture(scope="module")
def run_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    """A server with Studio pages, and the token of an agent run that waits until the end."""
    srv = agent_server(tmp_path_factory.mktemp("catalogue"), "none", studio={"pages": PAGES})
    try:
        with api(srv) as client:
            session_id = new_session(client)
            run = create_run(client, session_id, "token\nwait-for go\nanswer done", package="probe")
            token = wait_file(client, run["id"], "token").decode()
            try:
                yield srv, token
            finally:
                (srv.workspace / "agent" / "session-state" / session_id / "go").touch()
                assert wait_run(client, run["id"])["state"] == "succeeded"
    finally:
        srv.stop()


@asynccontextmanager
async def over_http(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    headers = {"authorization": f"Bearer {token}"}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert result.structured_content is not None
    return result.structured_content


def _names(srv: ServerProcess, token: str | None) -> list[str]:
    headers = {"authorization": f"Bearer {token}"}
    body = httpx.get(srv.url + "/jobs", headers=headers, timeout=30).json()
    names = [item["name"] for item in body["answer"]["items"]]
    assert body["answer"]["total"] == len(names)
    return names


def test_get_jobs_lists_every_job_for_the_admin_and_callable_ones_for_a_run(
    run_world: tuple[ServerProcess, str],
) -> None:
    srv, run_token = run_world
    every = set(all_jobs())
    assert {"help", "list_schedules", "list_studio_pages"} <= every
    assert set(_names(srv, srv.token)) == every
    as_run = set(_names(srv, run_token))
    assert as_run == every - ADMIN_ONLY_JOBS
    assert "list_studio_pages" in as_run and "list_schedules" not in as_run


def test_a_run_token_calling_an_admin_only_job_by_name_is_refused_at_the_gate(
    run_world: tuple[ServerProcess, str],
) -> None:
    srv, run_token = run_world
    headers = {"authorization": f"Bearer {run_token}"}
    for path in ("/jobs/list_schedules", "/jobs/list_schedules/events"):
        reply = httpx.post(srv.url + path, json={"arguments": {}}, headers=headers, timeout=30)
        assert reply.status_code == 403, reply.text
        assert GATE in reply.text
    pages = httpx.post(
        srv.url + "/jobs/list_studio_pages", json={"arguments": {}}, headers=headers, timeout=30
    )
    assert pages.status_code == 200 and [p["id"] for p in pages.json()["answer"]] == [
        "online",
        "sync",
    ]
    assert srv.call("list_schedules")["success"] is True  # the admin still may
    helped = httpx.post(srv.url + "/jobs/help", json={"arguments": {}}, headers=headers, timeout=30)
    named = {job["name"] for job in helped.json()["answer"]["jobs"]}
    assert named == set(all_jobs()) - ADMIN_ONLY_JOBS  # help lists what the run may call
    assert len(srv.call("help")["answer"]["jobs"]) == len(all_jobs())


def test_mcp_tools_list_the_axonx_jobs_and_a_run_token_gets_no_admin_only_one(
    run_world: tuple[ServerProcess, str],
) -> None:
    srv, run_token = run_world

    async def scenario() -> None:
        async with over_http(srv.url, srv.token) as session:
            admin = {t.name for t in (await session.list_tools()).tools}
            assert set(all_jobs()) - {"list_task_ids", "stream_task"} <= admin
            pages = await call(session, "list_studio_pages")
            assert [p["id"] for p in pages["answer"]] == ["online", "sync"]
        async with over_http(srv.url, run_token) as session:
            tools = {t.name for t in (await session.list_tools()).tools}
            assert "list_studio_pages" in tools and "help" in tools
            assert not tools & ADMIN_ONLY_JOBS, tools & ADMIN_ONLY_JOBS
            refused = await call(session, "list_schedules")  # by name, though not listed
            assert refused["success"] is False and GATE in refused["answer"], refused

    anyio.run(scenario)


def test_call_job_reaches_any_job_typed_on_both_clients(
    run_world: tuple[ServerProcess, str],
) -> None:
    srv, run_token = run_world
    handle = srv.call("submit", task="demo", x=2, y=3)["answer"]
    srv.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
    with Client(srv.url, token=srv.token) as client:
        pages = client.call_job("list_studio_pages")
        assert pages == [{"id": "online", **PAGES["online"], "schedules": []},
                         {"id": "sync", **PAGES["sync"], "schedules": [], "category": None}]  # fmt: skip
        status = client.call_job("status", TaskStatus, task_id=handle["task_id"])
        assert isinstance(status, TaskStatus) and status.state == "succeeded"
        assert client.call_job("version") == client.call_job("diagnose")["version"]
        with pytest.raises(JobFailed):
            client.call_job("status", task_id="base#demo#no-such-task")
        with pytest.raises(HTTPError) as bad:  # the job's own schema: no unknown argument
            client.call_job("list_studio_pages", page="online")
        assert bad.value.status_code == 422
    with Client(srv.url, token=run_token) as client, pytest.raises(HTTPError) as refused:
        client.call_job("list_schedules")
    assert refused.value.status_code == 403

    async def in_async() -> None:
        async with AsyncClient(srv.url, token=srv.token) as client:
            assert [p["id"] for p in await client.call_job("list_studio_pages")] == [
                "online",
                "sync",
            ]
            status = await client.call_job("status", TaskStatus, task_id=handle["task_id"])
            assert status.task_id == handle["task_id"]

    anyio.run(in_async)


@pytest.mark.parametrize(
    "name", ["../api/v1/tasks", "status/events", "status?x=1", "", "list tasks", "a" * 65, "%2e%2e"]
)
def test_call_job_refuses_a_name_that_would_make_another_request(
    run_world: tuple[ServerProcess, str], name: Any
) -> None:
    srv, _ = run_world
    with Client(srv.url, token=srv.token) as client, pytest.raises(ValueError, match="not a job"):
        client.call_job(name)

    async def in_async() -> None:
        async with AsyncClient(srv.url, token=srv.token) as client:
            with pytest.raises(ValueError, match="not a job"):
                await client.call_job(name)

    anyio.run(in_async)
