"""``runyard sync push`` between two real servers on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sync_helpers import ARTIFACT_CMD, eventually, push_cli, push_json, run_task, sha256, task_dir

from serverproc import ServerProcess, start_server


@pytest.fixture(scope="module")
def receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One receiver for the module: each test pushes tasks of names of its own to it."""
    srv = start_server(tmp_path_factory.mktemp("push") / "b")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def pair(tmp_path: Path, receiver: ServerProcess) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """A fresh sender (a push sends all it holds) and the shared receiver."""
    sender = start_server(tmp_path / "a")
    try:
        yield sender, receiver
    finally:
        sender.stop()


def test_push_copies_finished_tasks_with_artifacts_log_and_lineage(
    pair: tuple[ServerProcess, ServerProcess],
) -> None:
    sender, receiver = pair
    upstream = run_task(sender, "command", command=ARTIFACT_CMD, shell=True, task_name="up")
    down = run_task(sender, "demo", x=1, y=2, task_name="down", source_tasks=upstream["task_id"])

    only_down = push_json(sender, receiver, "--task", "demo")
    assert only_down["sent"] == [down["task_id"]] and only_down["bytes"] > 0
    graph = receiver.call("get_task_graph", task_id=down["task_id"])["answer"]
    nodes = {n["task_id"]: n for n in graph["nodes"]}
    assert nodes[upstream["task_id"]]["missing"] is True  # not synced: a missing node

    report = push_json(sender, receiver)
    assert report["sent"] == [upstream["task_id"]]
    assert report["skipped"] == [down["task_id"]] and report["refused"] == []
    ids = eventually(lambda: upstream["task_id"] in receiver.call("list_task_ids")["answer"])
    assert ids
    assert down["task_id"] in receiver.call("list_task_ids")["answer"]
    graph = receiver.call("get_task_graph", task_id=down["task_id"])["answer"]
    nodes = {n["task_id"]: n for n in graph["nodes"]}
    assert nodes[upstream["task_id"]]["missing"] is False
    assert nodes[down["task_id"]]["parent_ids"] == [upstream["task_id"]]

    for rel in ("metadata.json", "out.txt", "sub/data.bin", "events.jsonl"):
        mine, theirs = (
            task_dir(sender, upstream["task_id"]),
            task_dir(receiver, upstream["task_id"]),
        )
        assert sha256(theirs / rel) == sha256(mine / rel), rel
    meta = receiver.call("status", task_id=upstream["task_id"])["answer"]
    artifacts = meta["result"]["artifacts"]
    assert artifacts["sub/data.bin"]["sha256"] == sha256(
        task_dir(receiver, upstream["task_id"]) / "sub/data.bin"
    )
    assert meta["run_id"] == upstream["run_id"]
    assert meta["synced_from"]["run_id"] == upstream["run_id"]
    assert meta["synced_from"]["server"] and meta["synced_from"]["at"]
    expected_log = receiver.log_dir / "base" / upstream["task_id"] / f"{upstream['run_id']}.log"
    assert Path(meta["log_path"]) == expected_log.resolve()
    log = receiver.call("read_task_log", task_id=upstream["task_id"], offset=0)["answer"]
    assert "logged-by-command" in log["content"]
    assert "synced_from" not in sender.call("status", task_id=upstream["task_id"])["answer"]

    again = push_json(sender, receiver)
    assert again["sent"] == [] and again["bytes"] == 0
    assert sorted(again["skipped"]) == sorted([upstream["task_id"], down["task_id"]])


def test_a_running_task_is_not_sent(pair: tuple[ServerProcess, ServerProcess]) -> None:
    sender, receiver = pair
    done = run_task(sender, "demo", x=1, y=1, task_name="done")
    running = sender.call("submit", task="command", command="sleep 60", task_name="busy")["answer"]
    assert eventually(
        lambda: sender.call("status", task_id=running["task_id"])["answer"]["state"] == "running"
    )
    report = push_json(sender, receiver)
    assert report["sent"] == [done["task_id"]]
    named = push_json(sender, receiver, running["task_id"])
    assert named["sent"] == [] and named["refused"] == [running["task_id"]]
    assert "not finished" in named["reasons"][running["task_id"]]
    assert running["task_id"] not in receiver.call("list_task_ids")["answer"]
    assert not task_dir(receiver, running["task_id"]).exists()
    sender.call("cancel", task_id=running["task_id"])


def test_a_tampered_artifact_is_refused(pair: tuple[ServerProcess, ServerProcess]) -> None:
    sender, receiver = pair
    task = run_task(sender, "command", command=ARTIFACT_CMD, shell=True, task_name="tamper")
    data = task_dir(sender, task["task_id"]) / "sub" / "data.bin"
    data.write_bytes(b"x" + data.read_bytes()[1:])  # same size, other bytes
    proc = push_cli(sender, receiver)
    report = json.loads(proc.stdout)
    assert report["sent"] == [] and report["refused"] == [task["task_id"]]
    assert "sha256" in report["reasons"][task["task_id"]]
    assert not task_dir(receiver, task["task_id"]).exists()
    assert not [p for p in (receiver.workspace / "base").iterdir() if p.name.startswith(".")]


def test_an_active_receiver_task_is_refused(pair: tuple[ServerProcess, ServerProcess]) -> None:
    sender, receiver = pair
    mine = run_task(sender, "command", command="echo mine", task_name="clash")
    theirs = receiver.call("submit", task="command", command="sleep 60", task_name="clash")
    assert theirs["answer"]["task_id"] == mine["task_id"]
    report = push_json(sender, receiver)
    assert report["sent"] == [] and report["refused"] == [mine["task_id"]]
    assert "active on the receiver" in report["reasons"][mine["task_id"]]
    status = receiver.call("status", task_id=mine["task_id"])["answer"]
    assert status["run_id"] == theirs["answer"]["run_id"] and "synced_from" not in status
    receiver.call("cancel", task_id=mine["task_id"])
