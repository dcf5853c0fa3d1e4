"""A submit's ``depends_on``: the task waits, queued, for its upstreams through a real server;
it runs only after they succeeded, fails without running when one did not, and keeps
waiting across a kill -9 of the server."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runyard.client import Client
from runyard.workspace.layout import Workspace
from serverproc import ServerProcess, start_server, until

GATED = "while [ ! -e go ]; do sleep 0.05; done; exit {code}"



@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the tests that need no restart (each names tasks of its own)."""
    srv = start_server(tmp_path_factory.mktemp("deps") / "srv", token="deps-secret")
    try:
        yield srv
    finally:
        srv.stop()


def status(server: ServerProcess, task_id: str) -> dict[str, Any]:
    return server.call("status", task_id=task_id)["answer"]


def gated(server: ServerProcess, name: str, code: int = 0) -> str:
    handle = server.call(
        "submit", task="command", task_name=name, command=GATED.format(code=code), shell=True
    )["answer"]
    until(lambda: status(server, handle["task_id"])["state"] == "running")
    return str(handle["task_id"])


def release(server: ServerProcess, task_id: str) -> None:
    workspace = Workspace(server.workspace, server.log_dir)
    (workspace.task_dir(task_id) / "go").touch()


def finished(server: ServerProcess, task_id: str) -> dict[str, Any]:
    return until(lambda: (s := status(server, task_id))["state"] in (
        "succeeded", "failed", "cancelled") and s)  # fmt: skip


def test_a_dependent_runs_only_after_its_upstreams_succeeded(server: ServerProcess) -> None:
    first, second = gated(server, "first"), gated(server, "second")
    down = server.call(
        "submit", task="demo", task_name="down", x=1, y=2, depends_on=[first, second]
    )["answer"]["task_id"]
    time.sleep(1.5)  # the waiting run is looked at again within a second: still waiting
    waiting = status(server, down)
    assert waiting["state"] == "queued" and waiting["started_at"] is None
    assert waiting["waiting_for"] == [first, second]
    assert waiting["config"]["source_tasks"] == f"{first},{second}"  # also its lineage

    release(server, first)
    finished(server, first)
    time.sleep(1.5)
    assert status(server, down)["state"] == "queued"  # one upstream is still running
    release(server, second)
    ended = finished(server, down)
    upstream_end = finished(server, second)["finished_at"]
    assert ended["state"] == "succeeded" and ended["result"]["result"] == 3
    assert ended["started_at"] > upstream_end and "waiting_for" not in ended
    graph = server.call("get_task_graph", task_id=down)["answer"]
    assert {(e["from"], e["to"]) for e in graph["edges"]} >= {(first, down), (second, down)}


def test_a_failed_upstream_fails_its_dependents_and_none_of_them_runs(
    server: ServerProcess,
) -> None:
    up = gated(server, "doomed", code=3)
    child = server.call("submit", task="demo", task_name="child", x=1, y=2, depends_on=up)
    child_id = child["answer"]["task_id"]
    grandchild = server.call(
        "submit", task="demo", task_name="grandchild", x=1, y=2, depends_on=child_id
    )["answer"]["task_id"]

    release(server, up)
    assert finished(server, up)["state"] == "failed"
    for task_id, upstream in ((child_id, up), (grandchild, child_id)):
        ended = finished(server, task_id)
        assert ended["state"] == "failed", ended
        assert ended["error"].startswith(f"upstream failed: {upstream}")
        assert ended["started_at"] is None and ended["pid"] is None
        assert not Path(ended["log_path"]).exists()  # no worker ever ran


def test_an_unknown_upstream_is_refused_and_nothing_is_made(server: ServerProcess) -> None:
    before = server.call("list_task_ids")["answer"]
    for depends_on in (["base#demo#nowhere"], "base#demo#nowhere", ["not an id"]):
        with server.client() as client:
            reply = client.post("/jobs/submit", json={"arguments": {
                "task": "demo", "task_name": "orphan", "x": 1, "y": 2,
                "depends_on": depends_on}})  # fmt: skip
        assert reply.status_code in (200, 422), reply.text
        assert reply.status_code == 422 or reply.json()["success"] is False, reply.text
    assert server.call("list_task_ids")["answer"] == before
    with server.client() as client:
        reply = client.post("/jobs/submit", json={"arguments": {
            "task": "demo", "task_name": "orphan", "x": 1, "y": 2,
            "depends_on": ["base#demo#nowhere"]}})  # fmt: skip
    assert reply.status_code == 422 and "base#demo#nowhere" in reply.json()["detail"]


def test_a_task_cannot_wait_for_itself(server: ServerProcess) -> None:
    server.call("submit", task="demo", task_name="selfish", x=1, y=2)
    finished(server, "base#demo#selfish")
    answer = server.call(
        "submit", task="demo", task_name="selfish", x=1, y=2, depends_on=["base#demo#selfish"]
    )
    assert answer["success"] is False and "itself" in answer["answer"]
    assert status(server, "base#demo#selfish")["state"] == "succeeded"


def test_waiting_holds_across_a_kill_of_the_server(tmp_path: Path) -> None:
    root = tmp_path / "srv"
    first = start_server(root, token="deps-secret")
    try:
        up = gated(first, "steady")
        down = first.call("submit", task="demo", task_name="after", x=2, y=3, depends_on=up)
        down_id = down["answer"]["task_id"]
    finally:
        first.stop(signal.SIGKILL, keep_runs=True)
    second = start_server(root, token="deps-secret")
    try:
        assert status(second, down_id)["waiting_for"] == [up]
        time.sleep(1.5)
        assert status(second, down_id)["state"] == "queued"
        release(second, up)
        ended = finished(second, down_id)
        assert ended["state"] == "succeeded" and ended["result"]["result"] == 5
        assert ended["started_at"] > finished(second, up)["finished_at"]
    finally:
        second.stop()


def test_the_cli_and_the_client_take_upstreams(server: ServerProcess) -> None:
    """``runyard submit --after`` and ``Client.submit(depends_on=...)`` wait the same way."""
    up = gated(server, "shared")
    made = subprocess.run(
        [sys.executable, "-m", "runyard", "submit", "demo", "x=1", "y=1", "--name", "by-cli",
         "--after", up],
        env=server.cli_env(), capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert made.stdout.strip() == "base#demo#by-cli"
    with Client(server.url, server.token) as client:
        handle = client.submit("demo", name="by-client", x=2, y=2, depends_on=[up])
    for task_id in ("base#demo#by-cli", handle.task_id):
        assert status(server, task_id)["waiting_for"] == [up]
    shown = subprocess.run(
        [sys.executable, "-m", "runyard", "status", "base#demo#by-cli"],
        env=server.cli_env(), capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    assert re.search(rf"waiting for\s+{re.escape(up)}", shown), shown
    release(server, up)
    assert finished(server, "base#demo#by-cli")["result"]["result"] == 2
    assert finished(server, handle.task_id)["result"]["result"] == 4
