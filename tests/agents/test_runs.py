"""Runs of an in-process service, sandboxed and plain: continuity, queueing, cancel,
restart adoption, bounded answers, and what a run may not do."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_helpers import add_artifact, probes, results, start, wait_done
from agent_support import MODES, needs_bwrap

from runyard.agents.errors import AgentInvalid, RunActive, SessionClosed
from runyard.agents.layout import truncation_marker
from runyard.api.agentservice import AgentService
from runyard.wire import TaskState

Make = Callable[..., AgentService]


@pytest.mark.parametrize("mode", MODES)
def test_three_runs_share_history_and_state_across_a_restart(make_service: Make, mode: str) -> None:
    service = make_service(mode)
    session = service.catalog.create_session("continuity")
    add_artifact(service, session.id, b"a,b\n1,2\n", rel="data/prices.csv")
    first = wait_done(service, start(service, session.id, "checkpoint\nanswer first answer").id)
    assert first.state == TaskState.SUCCEEDED and first.isolation == mode
    second = wait_done(service, start(service, session.id, "checkpoint\nanswer second").id)
    service.stop()
    service = make_service(mode)
    third = wait_done(service, start(service, session.id, "checkpoint\nread in/data/prices.csv").id)
    assert third.state == TaskState.FAILED  # it wrote no answer
    context = probes(service, third.id)["context"]
    assert [(t["role"], t["content"]) for t in context["history"]] == [
        ("user", "checkpoint\nanswer first answer"), ("assistant", "first answer"),
        ("user", "checkpoint\nanswer second"), ("assistant", "second"),
    ]  # fmt: skip
    assert context["latestRunId"] == second.id and context["runId"] == third.id
    assert context["envFacts"]["isolation"] == mode
    assert [r["value"] for r in results(service, third.id)] == [3, "a,b\n1,2\n"]
    state = service.catalog.session_state(session.id)
    assert state.run_count == 3 and state.last_run_id == third.id
    history = service.catalog.session(session.id).history
    assert [t.run_id for t in history] == [first.id] * 2 + [second.id] * 2 + [third.id]


def test_answer_is_in_history_as_soon_as_the_state_is_finished(make_service: Make) -> None:
    service = make_service("none")
    session = service.catalog.create_session()
    run = start(service, session.id, "sleep 0.2\nanswer visible")
    while not service.runs.run(run.id).state.terminal:
        pass
    assert service.catalog.session(session.id).history[-1].content == "visible"


def test_one_active_run_per_session_and_enqueue(make_service: Make) -> None:
    service = make_service("none")
    session = service.catalog.create_session()
    first = start(service, session.id, "wait-for go\nanswer one")
    with pytest.raises(RunActive):
        start(service, session.id, "answer two")
    queued = start(service, session.id, "answer two", enqueue=True)
    assert queued.state == TaskState.QUEUED
    (service.layout.state_dir(session.id) / "go").touch()
    assert wait_done(service, first.id).state == TaskState.SUCCEEDED
    assert wait_done(service, queued.id).state == TaskState.SUCCEEDED
    history = probes(service, queued.id)["context"]["history"]
    assert history[-1] == {
        "role": "assistant", "content": "one", "runId": first.id,
        "createdAt": history[-1]["createdAt"],
    }  # fmt: skip


@pytest.mark.parametrize("mode", MODES)
def test_cancel_running_and_queued(make_service: Make, mode: str) -> None:
    service = make_service(mode)
    session = service.catalog.create_session()
    marker = str(random.randint(100_000, 999_999))  # a sleep only this test starts
    running = start(service, session.id, f"spawn {marker}\nsleep {marker}")
    queued = start(service, session.id, "answer never", enqueue=True)
    out = service.layout.run_subdir(running.id, "out")
    deadline = time.monotonic() + 10
    while not (out / "spawned.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert service.runs.cancel(queued.id).state == TaskState.CANCELLED
    cancelled = service.runs.cancel(running.id)
    assert cancelled.state == TaskState.CANCELLED and cancelled.exit_code == 130
    if mode == "bwrap":  # the whole sandbox goes, even a process in its own session
        assert _wait_gone(marker, timeout=5) == []
    else:  # a plain run's process that left its group is beyond reach: only bwrap can
        for pid in _sleepers(marker):
            os.kill(pid, signal.SIGKILL)
    assert service.runs.cancel(running.id).state == TaskState.CANCELLED


def _wait_gone(marker: str, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (found := _sleepers(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def _sleepers(marker: str) -> list[int]:
    wanted = f"sleep\x00{marker}\x00".encode()
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and Path(f"/proc/{entry}/cmdline").read_bytes() == wanted:
                found.append(int(entry))
        except OSError:
            continue
    return found


def test_a_running_run_is_adopted_by_the_next_server(make_service: Make) -> None:
    service = make_service("none")
    session = service.catalog.create_session()
    run = start(service, session.id, "wait-for go\nanswer adopted")
    service.stop()
    restarted = make_service("none")
    assert restarted.runs.run(run.id).state == TaskState.RUNNING
    (restarted.layout.state_dir(session.id) / "go").touch()
    done = wait_done(restarted, run.id)
    assert done.state == TaskState.SUCCEEDED and done.exit_code == 0
    assert restarted.catalog.session(session.id).history[-1].content == "adopted"


def test_a_run_that_ended_while_no_server_ran_is_settled_once(make_service: Make) -> None:
    service = make_service("none")
    session = service.catalog.create_session()
    run = start(service, session.id, "wait-for go\nanswer meanwhile\nexit 3")
    service.stop()
    (service.layout.state_dir(session.id) / "go").touch()
    exit_file = service.layout.exit_file(run.id)
    deadline = time.monotonic() + 10
    while not exit_file.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    restarted = make_service("none")
    done = restarted.runs.run(run.id)
    assert done.state == TaskState.FAILED and done.exit_code == 3
    assert "exited with code 3" in done.error
    restarted.stop()
    again = make_service("none")
    answers = [t for t in again.catalog.session(session.id).history if t.role == "assistant"]
    assert [t.content for t in answers] == ["meanwhile"]


def test_no_answer_huge_answer_and_timeout(make_service: Make) -> None:
    service = make_service("none", agent_max_final_answer_bytes=4096, agent_run_timeout_seconds=1.5)
    session = service.catalog.create_session()
    silent = wait_done(service, start(service, session.id, "sleep 0").id)
    assert silent.state == TaskState.FAILED and silent.exit_code == 0
    assert "without writing out/final-answer.md" in silent.error
    huge = wait_done(service, start(service, session.id, "huge 100000").id)
    assert huge.state == TaskState.SUCCEEDED
    folded = service.catalog.session(session.id).history[-1].content
    assert folded == "x" * 4096 + truncation_marker(100000, 4096)
    slow = wait_done(service, start(service, session.id, "sleep 60").id, timeout=20)
    assert slow.state == TaskState.FAILED and "Timed out after 1.5 s" in slow.error


@pytest.mark.sandbox
@needs_bwrap
def test_a_sandboxed_run_cannot_leave_its_workspace(make_service: Make, tmp_path: Path) -> None:
    service = make_service("bwrap")
    session = service.catalog.create_session()
    artifact = add_artifact(service, session.id, b"original\n", rel="data/input.csv")
    upload = service.catalog.artifact_file(artifact)
    other = wait_done(service, start(service, session.id, "answer other run's secret").id)
    other_out = service.layout.run_subdir(other.id, "out")
    script = "\n".join([
        "write /etc/evil x", f"write {tmp_path}/evil x", f"read {other_out}/final-answer.md",
        f"listdir {service.layout.workspaces}", "append in/data/input.csv tampered",
        "write /opt/agent/package/evil x", "write out/ok fine", "write state/ok fine",
        "read in/data/input.csv", "answer done",
    ])  # fmt: skip
    run = wait_done(service, start(service, session.id, script).id)
    assert run.state == TaskState.SUCCEEDED
    found = results(service, run.id)
    assert [r["ok"] for r in found] == [False] * 6 + [True] * 3, json.dumps(found, indent=1)
    assert found[-1]["value"] == "original\n"
    assert upload.read_text() == "original\n"
    assert not (tmp_path / "evil").exists()
    placed = probes(service, run.id)["context"]["inputArtifacts"][0]
    assert placed["placement"] in ("hardlink", "reflink") and placed["path"] == "in/data/input.csv"


def test_a_plain_run_gets_a_copy_so_the_upload_stays_intact(make_service: Make) -> None:
    service = make_service("none")
    session = service.catalog.create_session()
    artifact = add_artifact(service, session.id, b"original\n")
    run = wait_done(service, start(service, session.id, "answer x").id)
    placed = probes(service, run.id)["context"]["inputArtifacts"][0]
    assert placed["placement"] in ("copy", "reflink")
    assert placed["path"] == f"in/{artifact.stored_name}"
    script = f"append {placed['path']} tampered\nanswer y"
    wait_done(service, start(service, session.id, script).id)
    assert service.catalog.artifact_file(artifact).read_text() == "original\n"


def test_refusals_before_anything_is_created(make_service: Make) -> None:
    service = make_service("none")
    session, other = service.catalog.create_session(), service.catalog.create_session()
    foreign = add_artifact(service, other.id, b"x")
    for bad, message in [
        ({"package": "nope"}, "No agent package 'nope'"),
        ({"artifact_ids": [foreign.id]}, "belongs to another session"),
        ({"artifact_ids": ["art-unknown"]}, "Unknown artifact"),
    ]:
        with pytest.raises(Exception, match=message):
            service.runs.create(_request(session.id, **bad))
    with pytest.raises(AgentInvalid, match="non-empty"):
        service.runs.create(_request(session.id, user_prompt=" "))
    service.catalog.set_status(session.id, _closed())
    with pytest.raises(SessionClosed):
        start(service, session.id, "answer x")
    assert service.runs.list_runs(session.id, None, None, None).items == []
    assert list(service.layout.workspaces.iterdir()) == []


def _request(session_id: str, user_prompt: str = "answer x", **extra: object):  # type: ignore[no-untyped-def]
    from runyard.agents.runs import RunRequest

    return RunRequest(session_id, user_prompt, **extra)  # type: ignore[arg-type]


def _closed():  # type: ignore[no-untyped-def]
    from runyard.agents.models import SessionStatus

    return SessionStatus.CLOSED


def test_an_adopted_run_can_be_cancelled(make_service: Make) -> None:
    service = make_service("none")
    session = service.catalog.create_session()
    run = start(service, session.id, "sleep 60")
    service.stop()
    restarted = make_service("none")
    cancelled = restarted.runs.cancel(run.id)
    assert cancelled.state == TaskState.CANCELLED and cancelled.exit_code == 130


def test_a_queued_run_of_a_closed_session_fails_when_its_turn_comes(make_service: Make) -> None:
    service = make_service("none")
    session = service.catalog.create_session()
    first = start(service, session.id, "wait-for go\nanswer one")
    queued = start(service, session.id, "answer two", enqueue=True)
    service.catalog.set_status(session.id, _closed())
    (service.layout.state_dir(session.id) / "go").touch()
    assert wait_done(service, first.id).state == TaskState.SUCCEEDED
    refused = wait_done(service, queued.id)
    assert refused.state == TaskState.FAILED and "closed" in refused.error


def test_unfinished_uploads_are_swept_at_start(make_service: Make) -> None:
    service = make_service("none")
    session = service.catalog.create_session()
    kept = add_artifact(service, session.id, b"kept")
    uploads = service.layout.uploads
    (uploads / ".partial-0123").write_bytes(b"half")
    (uploads / "art-orphan-x.csv").write_bytes(b"never recorded")
    service.stop()
    make_service("none")
    assert sorted(p.name for p in uploads.iterdir()) == [kept.stored_name]


def test_max_concurrent_runs_holds_runs_of_other_sessions_queued_in_order(
    make_service: Make,
) -> None:
    service = make_service("none", max_concurrent_runs=1)
    first, second, third = (service.catalog.create_session(name) for name in "abc")
    running = start(service, first.id, "wait-for go\nanswer a")
    waiting = [start(service, second.id, "answer b"), start(service, third.id, "answer c")]
    # create() starts a run before it returns, when it may: these were held back
    assert service.runs.run(running.id).state == TaskState.RUNNING
    assert [service.runs.run(run.id).state for run in waiting] == [TaskState.QUEUED] * 2
    (service.layout.state_dir(first.id) / "go").touch()
    done = [wait_done(service, run.id) for run in [running, *waiting]]
    assert [run.state for run in done] == [TaskState.SUCCEEDED] * 3
    assert done[0].finished_at <= done[1].started_at <= done[1].finished_at <= done[2].started_at
