"""Retries through a server of their own: one restarted (a kill -9 while a retry waits, an
attempt that fails while none runs), one whose disk is full, one with a single slot. The
tests that share one server are in test_retries.py."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from retry_helpers import FLAKY, TOKEN, attempts, finished, flaky, runs, seconds, status

from runyard.workspace.layout import Workspace
from serverproc import start_server, until


def test_a_retry_waits_queued_with_its_reason_and_holds_no_slot(
    tmp_path: Path,
) -> None:
    srv = start_server(tmp_path / "srv", token=TOKEN, config={"max_concurrent_tasks": 1})
    try:
        counter = tmp_path / "tries"
        task_id = flaky(srv, "slow", counter, ok=2, retries=2, retry_delay_seconds=4)["task_id"]
        waiting = until(lambda: (s := status(srv, task_id))["attempt"] == 2 and s)
        assert waiting["state"] == "queued" and waiting["started_at"] is None
        assert waiting["queued_reason"].startswith("retry: attempt 2 of 3 at ")
        assert waiting["retry_at"] in waiting["queued_reason"]
        other = srv.call("submit", task="demo", x=1, y=1)["answer"]["task_id"]
        assert finished(srv, other)["state"] == "succeeded"  # the one slot was free
        assert status(srv, task_id)["state"] == "queued"
        final = finished(srv, task_id)
        assert final["state"] == "succeeded" and final["attempt"] == 2
        assert final["started_at"] >= waiting["retry_at"]
        first_end = runs(srv, task_id)[1]["finished_at"]  # the delay (4 s +-10 %) waited out
        assert seconds(final["started_at"]) - seconds(first_end) >= 3.5
    finally:
        srv.stop()


def test_a_retry_a_full_disk_keeps_from_being_made_is_made_once_there_is_room(
    tmp_path: Path,
) -> None:
    """Keeping the failed attempt in the history fails (ENOSPC): the task waits as a failed
    attempt with its retry to come (its dependents too), and the retry is made once the
    disk has room again."""
    full, counter = tmp_path / "full", tmp_path / "tries"
    full.touch()
    srv = start_server(
        tmp_path / "srv", token=TOKEN,
        env={"RUNYARD_FAULT_ENOSPC": f"history.staged:{full}"},
    )  # fmt: skip
    try:
        task_id = flaky(srv, "cramped", counter, ok=2, retries=1, retry_delay_seconds=0)["task_id"]
        down = srv.call("submit", task="demo", x=1, y=1, depends_on=task_id)["answer"]["task_id"]
        until(lambda: status(srv, task_id)["state"] == "failed")
        time.sleep(3)  # past a second look at both
        assert status(srv, task_id)["attempt"] == 1 and status(srv, down)["state"] == "queued"
        full.unlink()
        final = finished(srv, task_id)
        assert final["state"] == "succeeded" and final["attempt"] == 2 and attempts(counter) == 2
        assert finished(srv, down)["state"] == "succeeded"
    finally:
        srv.stop()


def test_a_kill_of_the_server_while_a_retry_waits_still_retries(tmp_path: Path) -> None:
    root, counter = tmp_path / "srv", tmp_path / "tries"
    first = start_server(root, token=TOKEN)
    try:
        task_id = flaky(first, "kept", counter, ok=2, retries=2, retry_delay_seconds=4)["task_id"]
        waiting = until(lambda: (s := status(first, task_id))["attempt"] == 2 and s)
        assert waiting["state"] == "queued" and waiting["retry_at"]
    finally:
        first.stop(signal.SIGKILL, keep_runs=True)
    second = start_server(root, token=TOKEN)
    try:
        final = finished(second, task_id)
        assert final["state"] == "succeeded" and final["attempt"] == 2 and attempts(counter) == 2
        assert final["run_id"] == waiting["run_id"]  # the waiting run itself, launched
        assert final["started_at"] >= waiting["retry_at"]  # not before its time
        assert [r["state"] for r in runs(second, task_id)] == ["succeeded", "failed"]
    finally:
        second.stop()


def test_an_attempt_that_fails_while_no_server_runs_is_retried_at_the_next_start(
    tmp_path: Path,
) -> None:
    root, counter, gate = tmp_path / "srv", tmp_path / "tries", tmp_path / "go"
    command = f"while [ ! -e {gate} ]; do sleep 0.05; done; " + FLAKY.format(counter=counter, ok=2)
    first = start_server(root, token=TOKEN)
    try:
        task_id = first.call(
            "submit", task="command", task_name="unwatched", command=command, shell=True,
            retries=1, retry_delay_seconds=0,
        )["answer"]["task_id"]  # fmt: skip
        until(lambda: status(first, task_id)["state"] == "running")
    finally:
        first.stop(signal.SIGKILL, keep_runs=True)
    gate.touch()  # attempt 1 fails while no server watches it
    workspace = Workspace(root / "ws", root / "logs")
    until(lambda: (s := workspace.read_status(task_id)) is not None and s.state == "failed")
    second = start_server(root, token=TOKEN)
    try:
        final = finished(second, task_id)
        assert final["state"] == "succeeded" and final["attempt"] == 2 and attempts(counter) == 2
    finally:
        second.stop()
