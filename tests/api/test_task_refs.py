"""Task references through a real server: a task's name, ``type:name`` or ``type:task:name``
wherever a task id is taken (Job API, its events, /api/v1 routes, MCP); ambiguity is a 409
that lists the matches; a run token resolves only among its own session's tasks."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from runyard.runtime.submitters import record_submitter, run_submitter
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskStatus
from serverproc import ServerProcess, read_sse, start_server, until

sys.path.insert(0, str(Path(__file__).parents[1] / "agents"))

from agent_support import needs_bwrap  # noqa: E402
from api_helpers import agent_server, api, create_run, new_session, wait_file, wait_run  # noqa: E402


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """An admin's server: base#demo#twin, base#command#twin and base#demo#solo."""
    proc = start_server(tmp_path_factory.mktemp("refs") / "srv")
    try:
        for task, name, extra in (
            ("demo", "twin", {"x": 1, "y": 2}),
            ("command", "twin", {"command": "true"}),
            ("demo", "solo", {"x": 2, "y": 3}),
        ):
            handle = proc.call("submit", task=task, task_name=name, **extra)["answer"]
            done = proc.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
            assert done["success"], done
        yield proc
    finally:
        proc.stop()


def _job(http: httpx.Client, name: str, **arguments: Any) -> httpx.Response:
    return http.post(f"/jobs/{name}", json={"arguments": arguments})


def test_jobs_take_a_unique_name_and_the_colon_form(srv: ServerProcess) -> None:
    with srv.client() as http:
        for ref in ("solo", "demo:solo", "base:solo", "base:demo:solo", "demo#solo"):
            reply = _job(http, "status", task_id=ref)
            assert reply.status_code == 200 and reply.json()["success"], (ref, reply.text)
            assert reply.json()["answer"]["task_id"] == "base#demo#solo"  # canonical form
        log = _job(http, "read_task_log", task_id="solo").json()
        assert "Demo result=5" in log["answer"]["content"]
        graph = _job(http, "get_task_graph", task_id="base:demo:solo").json()["answer"]
        assert graph["selected_id"] == "base#demo#solo"
        context = _job(http, "get_task_context", task_id="demo:twin").json()["answer"]
        assert context["task_id"] == "base#demo#twin"
        assert _job(http, "cancel", task_id="command:twin").json() == {
            "answer": False, "success": True, "metadata": {},
        }  # fmt: skip
        events = http.post("/jobs/stream_task/events", json={"arguments": {"task_id": "solo"}})
        final = read_sse(events.text.splitlines())[-1]
        assert final["data"]["answer"]["task_id"] == "base#demo#solo"
        # a name of no task answers as a full id of no task does, in the stream too
        missing = _job(http, "status", task_id="nope").json()
        assert missing["success"] is False and "nope" in missing["answer"]
        gone = http.post("/jobs/stream_task/events", json={"arguments": {"task_id": "nope"}})
        assert read_sse(gone.text.splitlines())[-1]["data"]["success"] is False


def test_an_ambiguous_name_is_a_409_listing_the_matches(srv: ServerProcess) -> None:
    both = ["base#command#twin", "base#demo#twin"]
    with srv.client() as http:
        for job in ("status", "read_task_log", "get_task_graph", "cancel"):
            reply = _job(http, job, task_id="twin")
            assert reply.status_code == 409, (job, reply.text)
            assert all(task_id in reply.json()["detail"] for task_id in both)
        stream = http.post("/jobs/stream_task/events", json={"arguments": {"task_id": "twin"}})
        assert stream.status_code == 409
        # delete_tasks: nothing is deleted when one of the names is ambiguous
        refused = _job(http, "delete_tasks", task_ids=["solo", "twin"])
        assert refused.status_code == 409
        assert _job(http, "status", task_id="base#demo#solo").json()["success"] is True
        runs = http.get("/api/v1/tasks/twin/runs")
        assert runs.status_code == 409 and runs.json()["error"]["code"] == "ambiguous_task_id"
        assert all(task_id in runs.json()["error"]["message"] for task_id in both)


def test_api_v1_routes_take_names_and_the_colon_form(srv: ServerProcess) -> None:
    with srv.client() as http:
        listed = http.get("/api/v1/tasks/base:demo:solo/files")
        assert listed.status_code == 200, listed.text
        assert "status.json" in {item["path"] for item in listed.json()["items"]}
        by_name = http.get("/api/v1/tasks/solo/files/status.json")
        assert by_name.status_code == 200 and by_name.json()["task_id"] == "base#demo#solo"
        runs = http.get("/api/v1/tasks/demo:solo/runs")
        assert runs.status_code == 200 and runs.json()["task_id"] == "base#demo#solo"
        unknown = http.get("/api/v1/tasks/nope/files")
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "task_not_found"
        bad = http.get("/api/v1/tasks/a:b:c:d/runs")
        assert bad.status_code == 400


def test_a_submit_takes_upstream_names(srv: ServerProcess) -> None:
    with srv.client() as http:
        made = _job(http, "submit", task="demo", x=1, y=1, task_name="child",
                    depends_on=["solo"], source_tasks="demo:twin")  # fmt: skip
        assert made.status_code == 200 and made.json()["success"], made.text
        handle = made.json()["answer"]
        done = _job(http, "wait_task", task_id="child", run_id=handle["run_id"]).json()
        assert done["success"], done
        sources = done["answer"]["config"]["source_tasks"].split(",")
        assert set(sources) == {"base#demo#twin", "base#demo#solo"}  # depends_on is lineage
        graph = _job(http, "get_task_graph", task_id="child").json()["answer"]
        child = next(n for n in graph["nodes"] if n["task_id"] == "base#demo#child")
        assert set(child["parent_ids"]) == {"base#demo#solo", "base#demo#twin"}
        unknown = _job(http, "submit", task="demo", x=1, y=1, task_name="orphan",
                       depends_on="nope")  # fmt: skip
        assert unknown.status_code == 422 and "nope" in unknown.json()["detail"]
        twice = _job(http, "submit", task="demo", x=1, y=1, task_name="orphan",
                     depends_on=["twin"])  # fmt: skip
        assert twice.status_code == 409 and "base#command#twin" in twice.json()["detail"]
        assert _job(http, "status", task_id="orphan").json()["success"] is False  # not made


def test_mcp_tools_and_resources_take_names(srv: ServerProcess) -> None:
    async def scenario() -> None:
        headers = {"authorization": f"Bearer {srv.token}"}
        async with (
            create_mcp_http_client(headers=headers) as http,
            streamable_http_client(srv.url + "/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await session.call_tool("status", {"task_id": "demo:solo"})
            assert result.structured_content is not None
            assert result.structured_content["answer"]["task_id"] == "base#demo#solo"
            twin = await session.call_tool("status", {"task_id": "twin"})
            assert twin.is_error and "base#command#twin" in twin.content[0].text  # type: ignore[union-attr]
            text = (await session.read_resource("runyard://tasks/base:demo:solo/status")).contents
            assert json.loads(text[0].text)["task_id"] == "base#demo#solo"  # type: ignore[union-attr]

    anyio.run(scenario)


def _seed_task(workspace: Path, task_id: str, session_id: str, run_id: str) -> None:
    """A finished task of ``session_id`` written as the server writes one (status and the
    server's submitter record), moved into its type folder whole."""
    ws = Workspace.open(workspace, workspace.parent / "logs")
    task_type, task, name = task_id.split("#")
    status = TaskStatus(
        task_id=task_id, run_id="a" * 32, task_type=task_type, task_name=task,
        state="succeeded", config={"task_name": name}, created_at="2026-12-01T00:00:00Z",
        submitted_by=run_submitter(session_id, run_id),
    )  # fmt: skip
    record_submitter(ws, task_id, status.run_id, run_submitter(session_id, run_id))
    staging = workspace / ".seed" / task_id
    staging.mkdir(parents=True)
    (staging / "status.json").write_text(json.dumps(status.to_json()))
    staging.rename(ws.task_dir(task_id))


@pytest.mark.sandbox
@needs_bwrap
def test_a_run_token_resolves_names_among_its_own_sessions_tasks(tmp_path: Path) -> None:
    """The attacker is session A's run: it asks for names that also name session B's tasks
    (and an admin's) and must neither get them nor learn their ids from an ambiguity."""
    server = agent_server(tmp_path / "srv", "bwrap")
    try:
        with api(server, timeout=120) as client:
            held = {}
            for side in ("a", "b"):
                session_id = new_session(client, side)
                calls = [["hold", "GET", "release", None]]
                run = create_run(client, session_id, json.dumps(calls), package="scope_probe")
                token = wait_file(client, run["id"], "token").decode()
                held[side] = (session_id, run["id"], token)
            try:
                _attack(server, held)
            finally:
                for session_id, run_id, _ in held.values():
                    release = server.workspace / "agent" / "session-state" / session_id
                    (release / "release").touch()
                    wait_run(client, run_id, timeout=90)
    finally:
        server.stop()


def _attack(server: ServerProcess, held: dict[str, tuple[str, str, str]]) -> None:
    a_session, _, a_token = held["a"]
    b_session, b_run, b_token = held["b"]
    admin = server.client()
    run_a = httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {a_token}"})
    run_b = httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {b_token}"})
    with admin, run_a, run_b:
        for task, extra in (("demo", {"x": 1, "y": 1}), ("command", {"command": "true"})):
            made = _job(run_a, "submit", task=task, task_name="twin", **extra).json()
            assert made["success"], made
            done = _job(run_a, "wait_task", task_id=made["answer"]["task_id"],
                        run_id=made["answer"]["run_id"], poll_interval=0.1)  # fmt: skip
            assert done.json()["answer"]["state"] == "succeeded", done.text
        theirs = "etl#load#twin"
        _seed_task(server.workspace, theirs, b_session, b_run)
        _seed_task(server.workspace, "train#fit#only-b", b_session, b_run)
        until(lambda: _job(admin, "status", task_id=theirs).json()["success"])
        # A's own two twins are ambiguous to A: the list holds them and never B's
        mine = _job(run_a, "status", task_id="twin")
        assert mine.status_code == 409, mine.text
        assert "base#demo#twin" in mine.text and "base#command#twin" in mine.text
        assert theirs not in mine.text and "etl" not in mine.text
        runs = run_a.get("/api/v1/tasks/twin/runs")
        assert runs.status_code == 409 and theirs not in runs.text
        # B sees one twin, its own; the admin sees all three
        own = _job(run_b, "status", task_id="twin").json()
        assert own["success"] and own["answer"]["task_id"] == theirs
        everyone = _job(admin, "status", task_id="twin")
        assert everyone.status_code == 409 and theirs in everyone.text
        # names only B has: A gets "not found", worded with its own reference only
        for ref in ("only-b", "fit:only-b", "etl:twin", "load:twin"):
            hidden = _job(run_a, "status", task_id=ref)
            assert hidden.status_code == 200 and hidden.json()["success"] is False, hidden.text
            assert "train#fit" not in hidden.text and theirs not in hidden.text
            files = run_a.get(f"/api/v1/tasks/{ref}/files")
            assert files.status_code == 404 and "#" not in files.text, files.text
        # and A cannot delete B's task through a name
        assert _job(run_a, "delete_tasks", task_ids=["only-b"]).json()["answer"] == []
        assert _job(admin, "status", task_id="train:fit:only-b").json()["success"] is True
