"""The record keeper writes what a sandboxed worker sends only as far as it is the run's."""

from __future__ import annotations

import json
import time

from runyard.runtime.creation import create_task
from runyard.runtime.recordkeeper import (
    MAX_RECORD,
    PROGRESS_WRITE_INTERVAL,
    RecordKeeper,
    _joined,
)
from runyard.workspace.events import read_events
from runyard.workspace.records import Step, TaskState


def line(message) -> bytes:
    return json.dumps(message).encode()


def keeper_for(workspace, registry, name):
    queued = create_task(workspace, registry, "demo", {"x": 1, "y": 2, "task_name": name})
    return RecordKeeper(workspace, queued, 4242), queued


def test_identity_inputs_and_log_stay_the_servers(workspace, registry):
    keeper, queued = keeper_for(workspace, registry, "ident")
    sent = queued.model_copy(update={
        "state": TaskState.RUNNING, "config": {"x": 666}, "log_path": "/etc/shadow",
        "created_at": "1999-01-01T00:00:00Z", "submitted_by": "admin",
        "steps": [Step(name="one", percentage=50.0)],
    })
    keeper.take(line({"status": sent.to_json(), "durable": False}))

    written = workspace.read_status(queued.task_id)
    assert written.state == "running" and written.steps[0].percentage == 50.0
    assert written.config == queued.config and written.log_path == queued.log_path
    assert written.created_at == queued.created_at and written.pid == 4242
    assert written.submitted_by == queued.submitted_by


def test_another_run_a_way_back_and_anything_after_the_end_are_refused(workspace, registry):
    keeper, queued = keeper_for(workspace, registry, "order")
    other = queued.model_copy(update={"run_id": "f" * 32, "state": TaskState.RUNNING})
    keeper.take(line({"status": other.to_json()}))
    assert workspace.read_status(queued.task_id).state == "queued"

    running = queued.model_copy(update={"state": TaskState.RUNNING})
    keeper.take(line({"status": running.to_json()}))
    keeper.take(line({"status": queued.to_json()}))  # back to queued: refused
    assert workspace.read_status(queued.task_id).state == "running"

    failed = running.model_copy(update={"state": TaskState.FAILED, "error": "boom"})
    keeper.take(line({"status": failed.to_json(), "durable": True}))
    keeper.take(line({"status": running.to_json()}))
    keeper.take(line({"event": {"kind": "progress", "name": "late"}}))
    assert workspace.read_status(queued.task_id).state == "running"  # the end waits
    keeper.finish()
    final = workspace.read_status(queued.task_id)
    assert final.state == "failed" and final.error == "boom"
    events, _ = read_events(workspace.events_path(queued.task_id))
    assert [e["state"] for _, e in events if e["kind"] == "state"] == [
        "queued", "running", "failed"]
    assert all(e.get("name") != "late" for _, e in events)
    assert keeper.dropped == 4


def test_a_success_without_metadata_or_with_a_missing_artifact_is_a_failure(workspace, registry):
    keeper, queued = keeper_for(workspace, registry, "nometa")
    done = queued.model_copy(update={"state": TaskState.SUCCEEDED, "result": {"sum": 3}})
    keeper.take(line({"status": done.to_json(), "durable": True}))
    keeper.finish()
    assert workspace.read_status(queued.task_id).state == "failed"
    assert workspace.read_metadata(queued.task_id) is None

    keeper, queued = keeper_for(workspace, registry, "gone")
    result = {"artifacts": {"a": {"path": "a.txt", "size": 1, "sha256": "0" * 64}}}
    meta = {"task_id": queued.task_id, "reg_name": "demo", "created_at": queued.created_at,
            "task_type": "base", "input_params": {"forged": 1}, "output_params": result}
    keeper.take(line({"metadata": meta}))
    done = queued.model_copy(update={"state": TaskState.SUCCEEDED, "result": result})
    keeper.take(line({"status": done.to_json()}))
    keeper.finish()
    final = workspace.read_status(queued.task_id)
    assert final.state == "failed" and "artifact" in final.error


def test_artifacts_are_hashed_again_by_the_keeper(workspace, registry):
    keeper, queued = keeper_for(workspace, registry, "hashed")
    (workspace.task_dir(queued.task_id) / "a.txt").write_text("real bytes")
    result = {"artifacts": {"a": {"path": "a.txt", "size": 1, "sha256": "0" * 64}}}
    meta = {"task_id": queued.task_id, "reg_name": "demo", "created_at": queued.created_at,
            "task_type": "base", "input_params": {"forged": 1}, "output_params": result}
    keeper.take(line({"metadata": meta}))
    done = queued.model_copy(update={"state": TaskState.SUCCEEDED, "result": result})
    keeper.take(line({"status": done.to_json()}))
    keeper.finish()

    final = workspace.read_status(queued.task_id)
    metadata = workspace.read_metadata(queued.task_id)
    assert final.state == "succeeded"
    recorded = metadata.output_params["artifacts"]["a"]
    assert recorded["size"] == len("real bytes") and recorded["sha256"] != "0" * 64
    assert final.result == metadata.output_params
    assert metadata.input_params == queued.config


def test_parts_of_two_senders_are_joined_apart_and_a_flood_is_dropped(workspace, registry):
    """A forked child of the task sends beside its parent: each one's packets make its own
    record; a sender that never ends its record cannot make the keeper hold more."""
    keeper, queued = keeper_for(workspace, registry, "parts")
    running = line({"status": queued.model_copy(update={"state": TaskState.RUNNING}).to_json()})
    event = line({"event": {"kind": "progress", "name": "child", "percentage": 5.0}})
    parts: dict[bytes, bytearray] = {}
    first, rest = running[:40], running[40:]
    _joined(b"10 1\n" + first, parts, keeper)
    _joined(b"11 0\n" + event, parts, keeper)  # the child's whole record, between the two
    _joined(b"10 0\n" + rest, parts, keeper)
    assert workspace.read_status(queued.task_id).state == "running"
    events, _ = read_events(workspace.events_path(queued.task_id))
    assert any(e.get("name") == "child" for _, e in events)
    assert parts == {} and keeper.dropped == 0

    chunk = b"x" * (1 << 20)
    for _ in range(MAX_RECORD // len(chunk) + 1):
        _joined(b"12 1\n" + chunk, parts, keeper)
    assert keeper.dropped == 1 and sum(len(p) for p in parts.values()) <= MAX_RECORD


def test_a_flood_of_progress_is_written_at_the_workers_pace(workspace, registry):
    """A task that sends progress on the socket in a tight loop (not through the worker's
    pacing) makes the keeper write status.json at most once an interval; the last one is
    written all the same."""
    keeper, queued = keeper_for(workspace, registry, "flood")
    for percentage in range(1, 1001):
        sent = queued.model_copy(update={
            "state": TaskState.RUNNING, "steps": [Step(name="s", percentage=percentage / 10)]})
        keeper.take(line({"status": sent.to_json(), "durable": False}))
    assert keeper.status_writes < 50 and keeper.held
    time.sleep(PROGRESS_WRITE_INTERVAL)
    keeper.flush()
    assert not keeper.held
    assert workspace.read_status(queued.task_id).steps[0].percentage == 100.0
