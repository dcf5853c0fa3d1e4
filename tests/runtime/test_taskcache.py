"""Cached results through a real server: a cacheable submit whose key matches an earlier
success runs nothing and answers that task with ``cached: true``; anything that changes
the key (inputs, an upstream's artifact bytes, the plugin's version), an expiry, a deleted
or replaced task, or ``cache: false`` makes it run. Bodies count their runs in a file."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from cache_plugin import install, runs_counted
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from runyard import Pipeline
from runyard.client import Client
from runyard.runtime.creation import create_task
from runyard.runtime.recordkeeper import RecordKeeper
from runyard.runtime.taskcache import CACHE_DIR
from runyard.tasks.base import Task, describe
from runyard.workspace.layout import Workspace
from runyard.workspace.records import TaskState
from serverproc import ServerProcess, start_server, until

GATED = "while [ ! -e go ]; do sleep 0.05; done; exit 0"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cache-site")
    install(folder, "1.0")
    return folder


@pytest.fixture(scope="module")
def server(site: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(
        tmp_path_factory.mktemp("cache") / "srv", token="cache-secret",
        env={"PYTHONPATH": str(site)},
    )  # fmt: skip
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def counter(tmp_path: Path) -> Path:
    return tmp_path / "runs"


def submit(server: ServerProcess, task: str, **arguments: Any) -> dict[str, Any]:
    reply = server.call("submit", task=task, **arguments)
    assert reply["success"], reply
    return dict(reply["answer"])


def finished(server: ServerProcess, task_id: str) -> dict[str, Any]:
    return until(lambda: (s := server.call("status", task_id=task_id)["answer"])["state"] in (
        "succeeded", "failed", "cancelled") and s)  # fmt: skip


def ran(server: ServerProcess, task: str, **arguments: Any) -> dict[str, Any]:
    """Submit, wait for the end; the handle (asserted not cached) and the final status."""
    handle = submit(server, task, **arguments)
    assert "cached" not in handle, handle
    final = finished(server, handle["task_id"])
    assert final["state"] == "succeeded", final
    return final


def test_the_same_cacheable_submit_twice_runs_its_body_once(
    server: ServerProcess, counter: Path
) -> None:
    first = ran(server, "counted", value=7, counter=str(counter))
    assert first["cache_key"] and first["cache"] is True

    again = submit(server, "counted", value=7, counter=str(counter))
    assert again == {"task_id": first["task_id"], "run_id": first["run_id"], "task": "counted",
                     "cached": True}  # fmt: skip
    waited = server.call("wait_task", task_id=again["task_id"], run_id=again["run_id"])
    assert waited["answer"]["result"] == first["result"]
    assert waited["answer"]["result"]["value"] == 7
    assert runs_counted(counter) == [first["task_id"]]
    metadata = Workspace(server.workspace, server.log_dir).read_metadata(first["task_id"])
    assert metadata is not None and metadata.cache_key == first["cache_key"]

    # cache: false runs it again; its success is the newest result of that key
    forced = ran(server, "counted", value=7, counter=str(counter), cache=False)
    assert forced["task_id"] != first["task_id"]
    assert forced["cache_key"] == first["cache_key"]
    assert runs_counted(counter) == [first["task_id"], forced["task_id"]]
    refreshed = submit(server, "counted", value=7, counter=str(counter))
    assert refreshed["cached"] is True and refreshed["task_id"] == forced["task_id"]
    assert len(runs_counted(counter)) == 2


def test_other_inputs_miss_and_a_task_not_asking_for_the_cache_always_runs(
    server: ServerProcess, counter: Path
) -> None:
    ran(server, "counted", value=1, counter=str(counter))
    ran(server, "counted", value=2, counter=str(counter))  # another input: another key
    assert submit(server, "counted", value=2, counter=str(counter))["cached"] is True
    # a class without cache: neither looked up nor recorded unless the submit asks
    plain = ran(server, "uncached", value=1, counter=str(counter))
    assert "cache_key" not in plain
    ran(server, "uncached", value=1, counter=str(counter))
    asked = ran(server, "uncached", value=1, counter=str(counter), cache=True)
    assert asked["cache_key"]
    served = submit(server, "uncached", value=1, counter=str(counter), cache=True)
    assert served["cached"] is True and served["task_id"] == asked["task_id"]
    assert len(runs_counted(counter)) == 5


def test_an_expired_result_is_not_served(server: ServerProcess, counter: Path) -> None:
    first = ran(server, "counted", value=3, counter=str(counter))
    time.sleep(1.2)
    late = ran(server, "counted", value=3, counter=str(counter), cache_expiry_seconds=1)
    assert late["task_id"] != first["task_id"]
    kept = submit(server, "counted", value=3, counter=str(counter), cache_expiry_seconds=3600)
    assert kept["cached"] is True and kept["task_id"] == late["task_id"]
    # the class's own expiry (fleeting: one second)
    fleeting = ran(server, "fleeting", value=3, counter=str(counter))
    assert submit(server, "fleeting", value=3, counter=str(counter))["cached"] is True
    time.sleep(1.2)
    ran(server, "fleeting", value=3, counter=str(counter))
    assert len(runs_counted(counter)) == 4 and fleeting["task_id"] in runs_counted(counter)


def test_a_deleted_or_replaced_task_never_serves(server: ServerProcess, counter: Path) -> None:
    first = ran(server, "counted", value=4, counter=str(counter))
    assert server.call("delete_tasks", task_ids=[first["task_id"]])["answer"] == [first["task_id"]]
    second = ran(server, "counted", value=4, counter=str(counter))
    assert second["task_id"] != first["task_id"]

    # a failed run of a key serves nothing: each submit runs (and fails) again
    unwritable = str(counter.parent / "no-such-folder" / "runs")
    doomed = submit(server, "counted", value=4, counter=unwritable)
    assert finished(server, doomed["task_id"])["state"] == "failed"
    again = submit(server, "counted", value=4, counter=unwritable)
    assert "cached" not in again and again["task_id"] != doomed["task_id"]
    assert finished(server, again["task_id"])["state"] == "failed"

    # a fixed name, replaced by a run with other inputs: the hint still names the id
    fixed = ran(server, "counted", task_name="fixed", value=5, counter=str(counter))
    replaced = ran(server, "counted", task_name="fixed", value=6, counter=str(counter))
    assert replaced["task_id"] == fixed["task_id"] and replaced["run_id"] != fixed["run_id"]
    fresh = ran(server, "counted", value=5, counter=str(counter))
    assert fresh["task_id"] != fixed["task_id"] and fresh["result"]["value"] == 5
    assert len(runs_counted(counter)) == 5


def test_a_hint_naming_a_task_whose_records_disagree_is_not_served(
    server: ServerProcess, counter: Path
) -> None:
    """The index is a hint: one that names a task of other inputs (a stale or damaged index,
    say one restored from an older backup) is checked against that task's records."""
    ours = ran(server, "counted", value=8, counter=str(counter))
    other = ran(server, "counted", value=9, counter=str(counter))
    hints = sorted((server.workspace / CACHE_DIR).rglob("*.json"))
    assert hints
    for hint in hints:  # every hint now names the task of value 9 first
        text = hint.read_text().replace(ours["task_id"], other["task_id"])
        hint.write_text(text)
    again = ran(server, "counted", value=8, counter=str(counter))
    assert again["result"]["value"] == 8
    assert runs_counted(counter) == [ours["task_id"], other["task_id"], again["task_id"]]


def test_a_task_received_by_sync_never_answers(server: ServerProcess, counter: Path) -> None:
    """A sync receiver writes the peer's records with synced_from in the status: whatever
    they claim (this very key and inputs), a result made elsewhere does not answer here."""
    ours = ran(server, "counted", value=12, counter=str(counter))
    workspace = Workspace(server.workspace, server.log_dir)
    path = workspace.status_path(ours["task_id"])
    status = json.loads(path.read_text())
    status["synced_from"] = {"server": "peer-1", "run_id": status["run_id"], "at": "2026-12-07"}
    path.write_text(json.dumps(status))
    again = ran(server, "counted", value=12, counter=str(counter))
    assert again["task_id"] != ours["task_id"]
    assert runs_counted(counter) == [ours["task_id"], again["task_id"]]


def test_changed_upstream_artifact_bytes_miss_and_the_same_bytes_hit(
    server: ServerProcess, counter: Path
) -> None:
    def upstream(text: str) -> str:
        command = f"printf {text} > data.txt"
        final = ran(server, "command", task_name="up", command=command, shell=True)
        return str(final["task_id"])

    up = upstream("A")
    first = ran(server, "counted", value=1, counter=str(counter), depends_on=[up])
    assert first["config"]["source_tasks"] == up
    hit = submit(server, "counted", value=1, counter=str(counter), depends_on=[up])
    assert hit["cached"] is True and hit["task_id"] == first["task_id"]
    assert upstream("B") == up  # the same upstream id, other bytes
    second = ran(server, "counted", value=1, counter=str(counter), source_tasks=up)
    assert second["task_id"] != first["task_id"]
    upstream("A")  # the first bytes again: the first result serves
    back = submit(server, "counted", value=1, counter=str(counter), source_tasks=up)
    assert back["cached"] is True and back["task_id"] == first["task_id"]
    assert len(runs_counted(counter)) == 2


def test_a_waiting_submit_runs_and_records_its_key_when_released(
    server: ServerProcess, counter: Path
) -> None:
    """Decided: while an upstream has not succeeded the key cannot be known, so a submit
    that waits (depends_on) is not served from the cache; it gets its key when released."""
    gate = submit(server, "command", task_name="gate", command=GATED, shell=True)["task_id"]
    until(lambda: server.call("status", task_id=gate)["answer"]["state"] == "running")
    handle = submit(server, "counted", value=2, counter=str(counter), depends_on=[gate])
    assert "cached" not in handle
    waiting = server.call("status", task_id=handle["task_id"])["answer"]
    assert waiting["waiting_for"] == [gate] and waiting["cache"] is True
    assert "cache_key" not in waiting
    (Workspace(server.workspace, server.log_dir).task_dir(gate) / "go").touch()
    final = finished(server, handle["task_id"])
    assert final["state"] == "succeeded" and final["cache_key"]
    served = submit(server, "counted", value=2, counter=str(counter), depends_on=[gate])
    assert served["cached"] is True and served["task_id"] == handle["task_id"]
    assert runs_counted(counter) == [handle["task_id"]]


def test_the_client_passes_cache_and_reads_cached(server: ServerProcess, counter: Path) -> None:
    with Client(server.url, token=server.token) as client:
        first = client.submit("uncached", value=11, counter=str(counter), cache=True)
        assert first.cached is False
        client.wait(first)
        again = client.submit("uncached", value=11, counter=str(counter), cache=True)
        assert again.cached is True and again.task_id == first.task_id
        assert client.wait(again).result["value"] == 11
    assert runs_counted(counter) == [first.task_id]


def runyard(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runyard", *args], env=server.cli_env(), capture_output=True,
        text=True, timeout=60, check=True,
    )  # fmt: skip


def test_the_cli_says_which_task_served_a_cached_submit(
    server: ServerProcess, counter: Path
) -> None:
    fields = ["uncached", "value=21", f"counter={json.dumps(str(counter))}"]
    first = runyard(server, "submit", *fields, "--cache", "--wait")
    task_id = runs_counted(counter)[0]
    assert task_id in first.stdout and "served by" not in first.stderr
    again = runyard(server, "submit", *fields, "--cache")
    assert again.stdout.strip() == task_id  # stdout stays the task id, for scripts
    assert f"cached: served by {task_id}" in again.stderr and "nothing ran" in again.stderr
    answer = json.loads(runyard(server, "submit", *fields, "--cache", "--json").stdout)
    assert answer["cached"] is True and answer["task_id"] == task_id
    plain = runyard(server, "submit", *fields, "--no-cache", "--wait")
    assert "served by" not in plain.stderr
    assert len(runs_counted(counter)) == 2 and runs_counted(counter)[1] != task_id
    old = runyard(server, "submit", *fields, "--cache", "--cache-expiry", "0", "--wait")
    assert "served by" not in old.stderr and len(runs_counted(counter)) == 3


def test_a_bad_cache_argument_is_a_422_and_nothing_is_made(server: ServerProcess) -> None:
    before = server.call("list_task_ids")["answer"]
    for bad in ({"cache": "sometimes"}, {"cache_expiry_seconds": -1}):
        with server.client() as client:
            body = {"arguments": {"task": "demo", "x": 1, "y": 2, **bad}}
            reply = client.post("/jobs/submit", json=body)
        assert reply.status_code == 422, reply.text
        assert next(iter(bad)) in reply.text
    assert server.call("list_task_ids")["answer"] == before


def test_a_new_plugin_version_misses(tmp_path: Path, counter: Path) -> None:
    site, root = tmp_path / "site", tmp_path / "srv"
    install(site, "1.0")
    server = start_server(root, token="v-secret", env={"PYTHONPATH": str(site)})
    try:
        first = ran(server, "counted", value=1, counter=str(counter))
        assert submit(server, "counted", value=1, counter=str(counter))["cached"] is True
    finally:
        server.stop()
    install(site, "2.0")
    server = start_server(root, token="v-secret", env={"PYTHONPATH": str(site)})
    try:
        second = ran(server, "counted", value=1, counter=str(counter))
        assert second["cache_key"] != first["cache_key"]
        assert submit(server, "counted", value=1, counter=str(counter))["cached"] is True
    finally:
        server.stop()
    assert runs_counted(counter) == [first["task_id"], second["task_id"]]


def test_the_docs_example_runs_once_then_answers_from_the_cache(
    server: ServerProcess, tmp_path: Path
) -> None:
    """docs/workflows.md, Caching: the shell example, its counter file moved into tmp_path."""
    text = (Path(__file__).parents[2] / "docs" / "workflows.md").read_text()
    section = text.split("\n## Caching\n", 1)[1].split("\n## ", 1)[0]
    script = section.split("```sh\n", 1)[1].split("```", 1)[0]
    counter = tmp_path / "prices.runs"
    assert "/tmp/prices.runs" in script
    env = server.cli_env()
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"  # this venv's runyard
    shown = subprocess.run(
        ["bash", "-e", "-c", script.replace("/tmp/prices.runs", str(counter))],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stdout + shown.stderr
    first = json.loads(shown.stdout.split("\n}\n", 1)[0] + "\n}")
    assert first["state"] == "succeeded" and first["cache_key"]
    served = shown.stdout.split("\n}\n", 1)[1].split()[0]
    assert served == first["task_id"]
    assert f"cached: served by {first['task_id']}" in shown.stderr
    assert counter.read_text().count("ran") == 2  # the first and the --no-cache run


def test_a_pipeline_run_again_takes_its_cached_step_and_runs_the_rest(
    server: ServerProcess, counter: Path
) -> None:
    """A step answered from the cache makes no task: the run records the task that served
    it, and the steps after it wait for (and name) that task."""
    pipe = Pipeline("cachepipe")
    first = pipe.task("counted", value=31, counter=str(counter))
    pipe.task("uncached", value=32, counter=str(counter), depends_on=[first])

    def run_pipeline() -> dict[str, Any]:
        with server.client() as client:
            reply = client.post("/api/v1/pipelines/runs", json=pipe.wire())
            assert reply.status_code == 200, reply.text
            path = f"/api/v1/pipelines/runs/{reply.json()['id']}"
            return until(lambda: (r := client.get(path).json())["state"] != "running" and r)

    earlier = run_pipeline()
    assert earlier["state"] == "succeeded", earlier
    etl, train = (step["task_id"] for step in earlier["steps"])
    again = run_pipeline()
    assert again["state"] == "succeeded", again
    served, retrained = (step["task_id"] for step in again["steps"])
    assert served == etl and retrained != train
    status = server.call("status", task_id=retrained)["answer"]
    assert status["config"]["source_tasks"] == etl
    assert runs_counted(counter) == [etl, train, retrained]


def test_mcp_submit_takes_cache_and_answers_cached(server: ServerProcess, counter: Path) -> None:
    """The MCP submit tool has the Job API's schema: cache and cache_expiry_seconds."""

    async def scenario() -> list[dict[str, Any]]:
        headers = {"authorization": f"Bearer {server.token}"}
        async with (
            create_mcp_http_client(headers=headers) as http,
            streamable_http_client(server.url + "/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            fields = tools["submit"].input_schema["properties"]
            assert {"cache", "cache_expiry_seconds"} <= set(fields)
            answers = []
            for _ in range(2):
                arguments = {"task": "uncached", "value": 41, "counter": str(counter),
                             "cache": True}  # fmt: skip
                result = await session.call_tool("submit", arguments)
                assert result.structured_content is not None
                answers.append(result.structured_content["answer"])
                finished(server, answers[-1]["task_id"])
            return answers

    first, again = anyio.run(scenario)
    assert "cached" not in first and again["cached"] is True
    assert again["task_id"] == first["task_id"]
    assert runs_counted(counter) == [first["task_id"]]


@pytest.mark.parametrize(
    ("cache", "expiry"),
    [
        (lambda self: None, None),
        ("yes", None),
        (1, None),
        (True, -1),
        (True, "1h"),
        (True, True),
        (True, float("nan")),
    ],  # fmt: skip
)
def test_a_class_with_a_bad_cache_setting_does_not_load(cache: Any, expiry: Any) -> None:
    """A helper named cache (or a bad expiry) fails the class loudly instead of caching it."""
    bad = type("Bad", (Task,), {"__doc__": "Bad.", "cache": cache, "cache_expiry_seconds": expiry,
                                "run": lambda self, inputs, run: None})  # fmt: skip
    with pytest.raises(TypeError, match="cache"):
        describe(bad, "bad", None)
    good = type("Good", (Task,), {"__doc__": "Good.", "cache": True, "cache_expiry_seconds": 60,
                                  "run": lambda self, inputs, run: None})  # fmt: skip
    assert describe(good, "good", None).name == "good"


def test_the_record_keeper_takes_the_key_from_the_server_not_the_sandbox(
    workspace: Workspace, registry: Any
) -> None:
    """Whatever a sandboxed task sends over its record socket (the task's code can reach
    it), the key in its status and metadata is the one the server wrote when it queued it."""
    key = "a" * 64
    queued = create_task(workspace, registry, "demo", {"x": 1, "y": 2}, cache={"cache": True,
                         "cache_key": key})  # fmt: skip
    keeper = RecordKeeper(workspace, queued, 4242)
    forged = "f" * 64
    meta = {"task_id": queued.task_id, "reg_name": "demo", "created_at": queued.created_at,
            "task_type": "base", "input_params": queued.config, "output_params": {},
            "cache_key": forged}  # fmt: skip
    keeper.take(json.dumps({"metadata": meta}).encode())
    done = queued.model_copy(update={"state": TaskState.SUCCEEDED, "cache_key": forged})
    keeper.take(json.dumps({"status": done.to_json()}).encode())
    keeper.finish()
    final, metadata = workspace.read_status(queued.task_id), workspace.read_metadata(queued.task_id)
    assert final is not None and final.state == "succeeded" and final.cache_key == key
    assert metadata is not None and metadata.cache_key == key
