"""``status`` answered on the event loop gives what the thread-pool path gives: for an admin
task, a run-submitted one (its log where the recorded run put it), a running task whose
worker is gone (settled), a run token's scope, a missing task; and with the index held
by another thread it waits elsewhere, leaving the loop free."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from runyard.agents.models import RunScope
from runyard.api.jobs import current_status, status_now, wait_until_finished
from runyard.api.services import Services
from runyard.changes import ChangeHub
from runyard.config import Settings
from runyard.errors import TaskNotFound
from runyard.runtime.submitters import record_submitter, run_submitter

RUN = "ab" * 16
SESSION = "s-one"


def record(task_id: str, state: str, **extra: Any) -> dict[str, Any]:
    task_type, task_name, _ = task_id.split("#")
    data = {
        "task_id": task_id, "run_id": "cd" * 16, "task_type": task_type,
        "task_name": task_name, "state": state, "config": {"task_name": task_id.split("#")[2]},
        "created_at": "2026-03-01T10:00:00.000000Z", "started_at": None, "finished_at": None,
        "pid": None, "exit_code": 0, "error": "", "result": {}, "steps": [], "log_path": "",
    }  # fmt: skip
    return {**data, **extra}


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    settings = Settings.load(cli={"workspace_dir": tmp_path / "ws", "log_dir": tmp_path / "logs"})
    built = Services.build(settings)
    built.repository.start()
    try:
        yield built
    finally:
        built.repository.stop()


def seed(services: Services, data: dict[str, Any]) -> str:
    folder = services.workspace.task_dir(data["task_id"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "status.json").write_text(json.dumps(data))
    return str(data["task_id"])


def both(services: Services, task_id: str, scope: RunScope | None) -> tuple[Any, Any]:
    """The loop's answer and the thread-pool path's (an exception stands for itself)."""

    def outcome(call: Any) -> Any:
        try:
            return call().to_json()
        except Exception as exc:  # compared by type and text
            return (type(exc).__name__, str(exc))

    on_loop = outcome(lambda: asyncio.run(status_now(services, task_id, scope)))
    return on_loop, outcome(lambda: current_status(services, task_id, scope))


def hold_index(services: Services, release: threading.Event) -> threading.Thread:
    """Another thread holds the index's lock (as the watcher does while it reads folders)
    until ``release`` is set; it holds it when this returns."""
    held = threading.Event()

    def hold() -> None:
        with services.repository._index.lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10)
    return holder


def test_admin_and_run_submitted_tasks_answer_as_the_thread_pool_path(
    services: Services,
) -> None:
    admin = seed(services, record("etl#load#plain", "succeeded", log_path="/tmp/plain.log"))
    # a sandboxed task may have rewritten its own log_path: the recorded run decides
    forged = seed(services, record("etl#load#forged", "succeeded", log_path="/etc/passwd"))
    record_submitter(services.workspace, forged, RUN, run_submitter(SESSION, RUN))
    for task_id in (admin, forged):
        on_loop, off_loop = both(services, task_id, None)
        assert on_loop == off_loop
    on_loop, _ = both(services, forged, None)
    assert on_loop["log_path"] == str(services.workspace.run_log_path(forged, RUN).absolute())
    assert both(services, admin, None)[0]["log_path"] == "/tmp/plain.log"


def test_a_run_token_sees_only_its_session_and_missing_tasks_fail_alike(
    services: Services,
) -> None:
    own = seed(services, record("etl#load#own", "succeeded"))
    record_submitter(services.workspace, own, RUN, run_submitter(SESSION, RUN))
    admin = seed(services, record("etl#load#admins", "succeeded"))
    mine, other = RunScope(run_id=RUN, session_id=SESSION), RunScope("ef" * 16, "s-two")
    on_loop, off_loop = both(services, own, mine)
    assert on_loop == off_loop and on_loop["task_id"] == own
    for task_id, scope in ((own, other), (admin, mine), ("etl#load#absent", None)):
        on_loop, off_loop = both(services, task_id, scope)
        assert on_loop == off_loop == ("TaskNotFound", str(TaskNotFound(task_id)))
    on_loop, off_loop = both(services, "not an id", None)
    assert on_loop == off_loop and on_loop[0] != "TaskNotFound"


def test_a_running_task_whose_worker_is_gone_is_settled(services: Services) -> None:
    first = seed(services, record("etl#load#gone1", "running"))
    twin = seed(services, record("etl#load#gone2", "running"))
    on_loop = asyncio.run(status_now(services, first, None)).to_json()
    off_loop = current_status(services, twin, None).to_json()
    assert on_loop["state"] == off_loop["state"] == "failed"
    assert on_loop["error"] == off_loop["error"] != ""
    assert services.workspace.read_status(first).state == "failed"  # the end was written


def test_a_held_index_is_waited_for_off_the_loop(services: Services) -> None:
    task_id = seed(services, record("etl#load#held", "succeeded"))
    expected = current_status(services, task_id, None).to_json()
    release = threading.Event()
    holder = hold_index(services, release)

    async def main() -> tuple[Any, int]:
        ticks = 0
        answer = asyncio.create_task(status_now(services, task_id, None))
        threading.Timer(0.5, release.set).start()
        while not answer.done():
            ticks += 1
            await asyncio.sleep(0.01)
        return (await answer).to_json(), ticks

    try:
        started = time.monotonic()
        answer, ticks = asyncio.run(main())
    finally:
        release.set()
        holder.join(10)
    assert answer == expected
    assert time.monotonic() - started >= 0.5
    assert ticks >= 10, f"the loop ticked {ticks} times while the index was held"


def test_a_wait_for_a_run_that_ended_needs_no_thread(services: Services) -> None:
    task_id = seed(services, record("etl#load#ended", "succeeded"))
    expected = current_status(services, task_id, None).to_json()

    async def main() -> Any:
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = 1
        await limiter.acquire()  # the thread pool has no room left at all
        try:
            waited = wait_until_finished(services, ChangeHub(), task_id, "cd" * 16, 1.0)
            return (await asyncio.wait_for(waited, 5)).to_json()
        finally:
            limiter.release()

    assert asyncio.run(main()) == expected


def test_a_status_as_the_index_holds_it_is_answered_at_once_though_the_index_is_held(
    services: Services,
) -> None:
    """The watcher holds the index while it reads other tasks' files: a status whose file
    is what the index holds is answered on the loop without waiting for it, and a status
    changed since (not yet in the index) is never answered from the index."""
    task_id = seed(services, record("etl#load#busy", "succeeded"))
    status = services.workspace.read_status(task_id)
    assert status is not None
    services.workspace.write_status(status)  # the bytes runyard writes, as it answers them
    services.repository.refresh(task_id)
    expected = current_status(services, task_id, None).to_json()
    release = threading.Event()
    holder = hold_index(services, release)

    async def at_once() -> Any:
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = 1
        await limiter.acquire()  # no thread to wait in: the answer must come from the loop
        try:
            return (await asyncio.wait_for(status_now(services, task_id, None), 2)).to_json()
        finally:
            limiter.release()

    async def after_a_change() -> tuple[Any, float]:
        changed = status.model_copy(update={"error": "written while the index was held"})
        services.workspace.write_status(changed)
        threading.Timer(0.3, release.set).start()
        started = time.monotonic()
        answer = await asyncio.wait_for(status_now(services, task_id, None), 10)
        return answer.to_json(), time.monotonic() - started

    try:
        assert asyncio.run(at_once()) == expected
        answer, took = asyncio.run(after_a_change())
    finally:
        release.set()
        holder.join(10)
    assert answer["error"] == "written while the index was held"
    assert took >= 0.25  # read under the lock, once it was free
