"""Sync carries a task's kept runs: a push of a task rerun under one fixed name lands with
its earlier run readable by run id on the receiver (files, stored once there, and log).
Crafted kept-run members (a path that escapes, a run id that is none, a kept run without
a status of its own) refuse the whole task with nothing applied."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from crafted import END, TASK_ID, file_block, send, status_block, status_json, tree
from sync_helpers import push_json, run_task

from serverproc import ServerProcess, start_server


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    sender = start_server(tmp_path / "a")
    try:
        receiver = start_server(tmp_path / "b")
        try:
            yield sender, receiver
        finally:
            receiver.stop()
    finally:
        sender.stop()


def test_a_push_carries_the_kept_runs(pair) -> None:
    sender, receiver = pair
    cmd = "echo said {0}; echo {0} > note.txt; head -c 200000 /dev/zero > weights.bin"
    first = run_task(sender, "command", command=cmd.format("one"), shell=True, task_name="kr")
    second = run_task(sender, "command", command=cmd.format("two"), shell=True, task_name="kr")
    pushed = push_json(sender, receiver)
    assert pushed, pushed
    task = quote(first["task_id"], safe="")
    run1 = f"/api/v1/tasks/{task}/runs/{first['run_id']}"
    with receiver.client() as client:
        runs = client.get(f"/api/v1/tasks/{task}/runs").json()["runs"]
        assert [r["run_id"] for r in runs] == [second["run_id"], first["run_id"]]
        assert client.get(f"{run1}/files/note.txt").text == "one\n"
        weights = client.get(f"{run1}/files/weights.bin").content
        assert hashlib.sha256(weights).hexdigest() == hashlib.sha256(bytes(200000)).hexdigest()
    log = receiver.call("read_task_log", task_id=first["task_id"], run_id=first["run_id"])
    assert "said one" in log["answer"]["content"]
    assert not list((receiver.workspace / "base").rglob(".runs"))


KEPT = "a" * 32
KEPT_STATUS = file_block(f"runs/{KEPT}/files/status.json", status_json(run_id=KEPT))


@pytest.mark.parametrize(
    "members",
    [
        [KEPT_STATUS, file_block(f"runs/{KEPT}/files/../../../../../../escape.txt", b"x")],
        [file_block(f"runs/{KEPT}/files/.hidden", b"x")],
        [file_block("runs/..%2f/files/x.txt", b"x"), file_block("runs/../x/files/y", b"x")],
        [file_block(f"runs/{KEPT}/other/x.txt", b"x")],
        [file_block(f"runs/{KEPT}/files/note.txt", b"no status of its own")],
        [file_block(f"runs/{KEPT}/files/status.json", status_json(run_id="b" * 32))],
        [file_block(f"runs/{KEPT}/files/status.json", status_json(run_id=KEPT, state="running"))],
        [file_block("runs/r1/files/status.json", status_json())],  # the current run again
    ],
    ids=[
        "escape",
        "hidden",
        "bad-run-id",
        "not-files",
        "no-status",
        "other-run",
        "active",
        "current",
    ],  # fmt: skip
)
def test_crafted_kept_runs_refuse_the_whole_task(tmp_path: Path, members) -> None:
    receiver = start_server(tmp_path / "b")
    try:
        before = tree(receiver)
        reply = send(receiver, status_block() + b"".join(members) + END)
        assert reply.status_code in (413, 422), reply.text
        assert tree(receiver) == before
        assert not (receiver.workspace / "base" / TASK_ID).exists()
        assert not list(tmp_path.rglob("escape.txt"))
    finally:
        receiver.stop()
