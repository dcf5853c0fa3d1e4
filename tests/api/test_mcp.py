"""The MCP server driven by the SDK's own client: Streamable HTTP at /mcp and stdio."""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from runyard.agents.layout import AgentLayout
from runyard.api.catalogue import ADMIN_ONLY_JOBS
from runyard.api.compat_jobs import COMPAT_JOBS
from runyard.api.mcp.tools import tool_jobs
from serverproc import ServerProcess, kill_strays, start_server

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run  # noqa: E402

TOOLS = {
    "submit", "wait_task", "status", "list_task_statuses", "read_task_log", "get_task_graph",
    "get_task_context", "cancel", "delete_tasks", "list_installed_task_definitions",
    "get_task_definition",
}  # fmt: skip
PNG = b"\x89PNG\r\n\x1a\n\x00\xff binary"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the module: each test makes and reads tasks of its own."""
    proc = start_server(tmp_path_factory.mktemp("mcp") / "srv")
    try:
        yield proc
    finally:
        proc.stop()


@asynccontextmanager
async def over_http(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url + "/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def over_agent_socket(server: ServerProcess, token: str) -> AsyncIterator[ClientSession]:
    """What a sandboxed agent reaches: the server's agent-run Unix socket."""
    path = AgentLayout(server.workspace / "agent", server.log_dir).socket_path()
    transport = httpx2.AsyncHTTPTransport(uds=str(path))
    headers = {"authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(transport=transport, headers=headers, timeout=30) as http,
        streamable_http_client("http://runyard/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def over_stdio(workspace: Path, log_dir: Path, cwd: Path) -> AsyncIterator[ClientSession]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "runyard", "mcp", "--workspace-dir", str(workspace), "--log-dir", str(log_dir)],
        env=env,
        cwd=str(cwd),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def run(test: Callable[[], Awaitable[None]]) -> None:
    anyio.run(test)


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert result.structured_content is not None
    response = result.structured_content
    assert json.loads(result.content[0].text) == response  # type: ignore[union-attr]
    assert result.is_error is (not response["success"])
    return response


async def submit_and_wait(session: ClientSession, task: str, **inputs: Any) -> dict[str, Any]:
    handle = (await call(session, "submit", task=task, **inputs))["answer"]
    done = await call(session, "wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
    assert done["success"] is True, done
    return done["answer"]


def uri(task_id: str, rest: str) -> str:
    return f"runyard://tasks/{task_id.replace('#', '%23')}/{rest}"


async def read_text(session: ClientSession, address: str) -> str:
    contents = (await session.read_resource(address)).contents
    assert len(contents) == 1
    return contents[0].text  # type: ignore[union-attr]


async def exercise(session: ClientSession) -> dict[str, Any]:
    """List tools, submit and wait for a demo task, read it back as resources."""
    tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(tools) == TOOLS | set(COMPAT_JOBS)  # the seed's, then every AxonX job
    for name, tool in tools.items():
        assert tool.input_schema == tool_jobs(None)[name].args.model_json_schema()
    lines = (tools["submit"].description or "").splitlines()
    demo_line = next(line for line in lines if line.startswith("- demo: "))
    assert "x, y)" in demo_line and "fail, " in demo_line
    assert any(line.startswith("- command: ") for line in lines)
    status = await submit_and_wait(session, "demo", x=2, y=3)
    assert status["state"] == "succeeded" and status["result"]["result"] == 5
    read_back = json.loads(await read_text(session, uri(status["task_id"], "status")))
    assert read_back["run_id"] == status["run_id"] and read_back["state"] == "succeeded"
    metadata = json.loads(await read_text(session, uri(status["task_id"], "metadata")))
    assert metadata["input_params"]["x"] == 2 and metadata["output_params"]["result"] == 5
    definition = json.loads(await read_text(session, "runyard://definitions/demo"))
    assert set(definition["input_schema"]["properties"]) >= {"x", "y"}
    listed = {str(r.uri) for r in (await session.list_resources()).resources}
    assert {"runyard://definitions/demo", "runyard://definitions/command"} <= listed
    return status


def test_http_lists_tools_runs_a_task_and_serves_its_records(server: ServerProcess) -> None:
    async def scenario() -> None:
        async with over_http(server.url, server.token) as session:
            await exercise(session)
            templates = (await session.list_resource_templates()).resource_templates
            assert {t.uri_template for t in templates} >= {
                "runyard://tasks/{task_id}/status",
                "runyard://tasks/{task_id}/artifacts/{+path}",
            }
            command = r"printf '\211PNG\r\n\032\n\000\377 binary' > plot.png; echo hello log"
            status = await submit_and_wait(session, "command", command=command, shell=True)
            task_id = status["task_id"]
            blob = (await session.read_resource(uri(task_id, "artifacts/plot.png"))).contents[0]
            assert blob.mime_type == "image/png"
            assert base64.b64decode(blob.blob) == PNG  # type: ignore[union-attr]
            window = json.loads(await read_text(session, uri(task_id, "log?offset=0&limit=1024")))
            assert "hello log" in window["content"] and window["start_offset"] == 0
            raw_hash = f"runyard://tasks/{task_id}/status"  # a client that did not encode '#'
            assert json.loads(await read_text(session, raw_hash))["task_id"] == task_id

    run(scenario)


def test_bad_calls_answer_clear_errors(server: ServerProcess) -> None:
    async def scenario() -> None:
        async with over_http(server.url, server.token) as session:
            missing = await call(session, "wait_task", run_id="r")
            assert missing["answer"].startswith("ValidationError: task_id: Field required")
            absent = await call(session, "wait_task", task_id="base#demo#x")  # run_id optional
            assert absent["answer"].startswith("KeyError") and absent["success"] is False
            forwarded = await call(session, "status", task_id="base#demo#x", target="other")
            assert "'target'" in forwarded["answer"] and forwarded["success"] is False
            unknown = await call(session, "status", task_id="base#demo#nothing-here")
            assert unknown["answer"].startswith("KeyError") and unknown["success"] is False
            with pytest.raises(MCPError, match="Unknown resource"):
                await session.read_resource("runyard://elsewhere/x")
            with pytest.raises(MCPError, match="^ValueError: "):
                await session.read_resource(uri("base#demo#x", "artifacts/../../server.json"))

    run(scenario)


def test_a_symlink_in_a_task_folder_is_never_followed(server: ServerProcess) -> None:
    secret = server.root / "secret.txt"
    secret.write_text("host secret")

    async def scenario() -> None:
        async with over_http(server.url, server.token) as session:
            status = await submit_and_wait(session, "demo", x=1, y=1)
            task_dir = server.workspace / "base" / status["task_id"]
            assert task_dir.is_dir()
            (task_dir / "leak.txt").symlink_to(secret)
            with pytest.raises(MCPError) as refused:
                await session.read_resource(uri(status["task_id"], "artifacts/leak.txt"))
            assert str(refused.value).startswith("ValueError: "), refused.value
            assert "host secret" not in str(refused.value)

    run(scenario)


def test_mcp_is_behind_the_token_and_the_request_guard(server: ServerProcess) -> None:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"accept": "application/json, text/event-stream"}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.post("/mcp", json=hello, headers=accept).status_code == 401
        wrong = {**accept, "authorization": "Bearer wrong"}
        assert client.post("/mcp", json=hello, headers=wrong).status_code == 401
        token = {**accept, **server.headers}
        foreign = {**token, "origin": "http://evil.example"}
        assert client.post("/mcp", json=hello, headers=foreign).status_code == 403
        rebound = {**token, "host": "evil.example"}
        assert client.post("/mcp", json=hello, headers=rebound).status_code == 403
        plain = {**token, "content-type": "text/plain"}
        assert client.post("/mcp", content=json.dumps(hello), headers=plain).status_code == 415


def test_a_run_token_keeps_its_scope_over_mcp(tmp_path: Path) -> None:
    srv = agent_server(tmp_path / "srv", "none")
    admin_task = srv.call("submit", task="demo", x=1, y=2)["answer"]["task_id"]
    try:
        with api(srv) as client:
            session_id = new_session(client)
            agent_run = create_run(
                client, session_id, "token\nwait-for go\nanswer done", package="probe"
            )
            run_token = wait_file(client, agent_run["id"], "token").decode()
            try:
                run(lambda: _as_a_run(srv, run_token, admin_task))
            finally:
                (srv.workspace / "agent" / "session-state" / session_id / "go").touch()
                assert wait_run(client, agent_run["id"])["state"] == "succeeded"
        assert srv.call("status", task_id=admin_task)["success"] is True  # not deleted
    finally:
        srv.stop()


async def _as_a_run(srv: ServerProcess, run_token: str, admin_task: str) -> None:
    host_paths = (str(srv.workspace), str(srv.log_dir), str(srv.root))
    async with over_http(srv.url, run_token) as session:
        tools = {t.name for t in (await session.list_tools()).tools}
        assert tools == TOOLS | (set(COMPAT_JOBS) - ADMIN_ONLY_JOBS)  # never an admin-only job
        answers = [
            await call(session, "status", task_id=admin_task),
            await call(session, "read_task_log", task_id=admin_task),
            await call(session, "get_task_context", task_id=admin_task),
        ]
        for answer in answers:
            assert answer["success"] is False and answer["answer"].startswith("KeyError"), answer
        listed = await call(session, "list_task_statuses")
        assert listed["success"] is True and listed["answer"] == []
        assert (await call(session, "delete_tasks", task_ids=[admin_task]))["answer"] == []
        assert (await call(session, "cancel", task_id=admin_task))["answer"] is False
        forwarded = await call(session, "list_task_statuses", target="elsewhere")
        assert forwarded["success"] is False
        submitted = await call(session, "submit", task="demo", x=1, y=1)
        assert submitted["success"] is False  # a run without a sandbox may not start tasks
        with pytest.raises(MCPError) as refused:
            await session.read_resource(uri(admin_task, "status"))
        assert str(refused.value).startswith("KeyError: No status for task"), refused.value
        for text in [json.dumps(a) for a in answers] + [str(refused.value), json.dumps(submitted)]:
            assert not any(path in text for path in host_paths), text
    async with over_agent_socket(srv, run_token) as session:
        hidden = await call(session, "status", task_id=admin_task)
        assert hidden["success"] is False and hidden["answer"].startswith("KeyError"), hidden
        assert (await call(session, "list_task_statuses"))["answer"] == []


def test_stdio_relays_to_the_workspace_server(server: ServerProcess, tmp_path: Path) -> None:
    async def scenario() -> dict[str, Any]:
        async with over_stdio(server.workspace, server.log_dir, tmp_path) as session:
            return await exercise(session)

    status = anyio.run(scenario)
    seen_by_server = server.call("status", task_id=status["task_id"])
    assert seen_by_server["success"] is True
    assert seen_by_server["answer"]["run_id"] == status["run_id"]


def test_stdio_serves_the_files_when_no_server_runs(tmp_path: Path) -> None:
    workspace, log_dir = tmp_path / "ws", tmp_path / "logs"

    async def scenario() -> dict[str, Any]:
        async with over_stdio(workspace, log_dir, tmp_path) as session:
            return await exercise(session)

    try:
        status = anyio.run(scenario)
    finally:
        kill_strays(tmp_path)
    on_disk = json.loads((workspace / "base" / status["task_id"] / "status.json").read_text())
    assert on_disk["state"] == "succeeded" and on_disk["run_id"] == status["run_id"]
    assert not (workspace / "server.json").exists()
