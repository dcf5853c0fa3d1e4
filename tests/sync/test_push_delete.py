"""``sync push --delete``: what a source deleted goes on the receiver too — only tasks that
source sent, only those its filter covers, never without ``--delete``, never by a request
naming another source."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sync_helpers import push_json, run_task

from serverproc import ServerProcess, start_server


@pytest.fixture(scope="module")
def receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One receiver for the module: each test syncs tasks of names of its own to it and
    finds the receiver holding what the earlier tests left and its own tasks, no more."""
    srv = start_server(tmp_path_factory.mktemp("push-delete") / "b")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def pair(tmp_path: Path, receiver: ServerProcess) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """A fresh sender (a source of its own) and the shared receiver."""
    sender = start_server(tmp_path / "a")
    try:
        yield sender, receiver
    finally:
        sender.stop()


def ids(server: ServerProcess) -> set[str]:
    return set(server.call("list_task_ids")["answer"])


def test_deletions_propagate_only_with_delete_and_only_what_was_sent(
    pair: tuple[ServerProcess, ServerProcess],
) -> None:
    sender, receiver = pair
    earlier = ids(receiver)
    gone = run_task(sender, "demo", x=1, y=1, task_name="gone")["task_id"]
    kept = run_task(sender, "demo", x=1, y=2, task_name="kept")["task_id"]
    other_type = run_task(sender, "command", command="true", task_name="cmd")["task_id"]
    own = run_task(receiver, "demo", x=5, y=5, task_name="receivers-own")["task_id"]
    assert sorted(push_json(sender, receiver)["sent"]) == sorted([gone, kept, other_type])

    assert sender.call("delete_tasks", task_ids=[gone, other_type])["answer"]
    plain = push_json(sender, receiver)
    assert plain["deleted"] == [] and {gone, other_type} <= ids(receiver)  # not without it

    scoped = push_json(sender, receiver, "--delete", "--task", "demo")
    assert scoped["deleted"] == [gone]  # the command task is outside the filter
    assert ids(receiver) == earlier | {kept, other_type, own}

    everything = push_json(sender, receiver, "--delete")
    assert everything["deleted"] == [other_type]
    assert ids(receiver) == earlier | {kept, own}  # the receiver's own task is never the source's


def test_a_delete_naming_another_source_deletes_nothing(
    pair: tuple[ServerProcess, ServerProcess],
) -> None:
    sender, receiver = pair
    earlier = ids(receiver)
    sent = run_task(sender, "demo", x=1, y=1, task_name="sent")["task_id"]
    own = run_task(receiver, "demo", x=2, y=2, task_name="own")["task_id"]
    push_json(sender, receiver)
    source = receiver.call("status", task_id=sent)["answer"]["synced_from"]["server"]
    with receiver.client() as http:
        forged = http.post(
            "/api/v1/sync/delete", json={"source": "someone-else", "task_ids": [sent, own]}
        ).json()
        assert forged["deleted"] == [] and set(forged["refused"]) == {sent, own}
        as_source = http.post(
            "/api/v1/sync/delete", json={"source": source, "task_ids": [own]}
        ).json()
        assert as_source["deleted"] == [] and "not synced" in as_source["refused"][own]
        held = http.post("/api/v1/sync/held", json={"source": source}).json()
        assert held["task_ids"] == [sent]
        too_many = http.post(
            "/api/v1/sync/delete", json={"source": source, "task_ids": ["x"] * 1001}
        )
        assert too_many.status_code == 422
    assert ids(receiver) == earlier | {sent, own}
    no_token = httpx.post(receiver.url + "/api/v1/sync/delete", json={"source": source})
    assert no_token.status_code == 401


def test_a_newer_run_replaces_an_older_one_and_never_the_reverse(
    pair: tuple[ServerProcess, ServerProcess],
) -> None:
    sender, receiver = pair
    first = run_task(sender, "demo", x=1, y=1, task_name="rerun")
    push_json(sender, receiver)
    second = run_task(sender, "demo", x=2, y=2, task_name="rerun")  # a fixed-name rerun
    report = push_json(sender, receiver)
    assert report["sent"] == [second["task_id"]]
    assert report["replaced"] == {second["task_id"]: first["run_id"]}
    status = receiver.call("status", task_id=second["task_id"])["answer"]
    assert status["run_id"] == second["run_id"] and status["result"]["result"] == 4

    newer_here = run_task(receiver, "demo", x=3, y=3, task_name="rerun")  # newer on the receiver
    refused = push_json(sender, receiver)
    assert refused["sent"] == [] and refused["refused"] == [second["task_id"]]
    assert receiver.call("status", task_id=second["task_id"])["answer"]["run_id"] == (
        newer_here["run_id"]
    )
