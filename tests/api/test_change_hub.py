"""The one change hub: a record change wakes the streams waiting on it, from any thread."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from runyard.changes import ChangeHub
from serverproc import read_sse, start_server


def test_a_task_change_wakes_its_stream_long_before_the_poll(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "hub")
    try:
        handle = srv.call("submit", task="command", task_name="short", command="sleep 0.5")
        assert handle["success"], handle
        body = {"arguments": {"task_id": handle["answer"]["task_id"], "poll_interval": 60}}
        started = time.monotonic()
        with (
            srv.client() as client,
            client.stream("POST", "/jobs/stream_task/events", json=body) as reply,
        ):
            events = read_sse(reply.iter_lines())
        elapsed = time.monotonic() - started
    finally:
        srv.stop()
    assert events[-1]["event"] == "result" and events[-1]["data"]["success"] is True
    # without a wake-up the stream would sleep until its next heartbeat (15 s)
    assert elapsed < 5.0, elapsed


def test_changes_from_other_threads_wake_the_right_subscribers() -> None:
    async def scenario() -> tuple[bool, bool, bool, bool]:
        hub = ChangeHub()
        with hub.subscribe("run-a") as a, hub.subscribe("run-b") as b:
            worker = threading.Thread(target=hub.changed, args=("run-a",))
            worker.start()
            worker.join()
            woke_a, woke_b = await a.wait(2.0), await b.wait(0.05)
            threading.Thread(target=hub.changed_all).start()
            return woke_a, woke_b, await a.wait(2.0), await b.wait(2.0)

    assert asyncio.run(scenario()) == (True, False, True, True)


def test_a_change_for_a_closed_loop_is_dropped() -> None:
    hub = ChangeHub()
    held = hub.subscribe("gone")

    async def leave_subscribed() -> None:
        held.__enter__()  # not left while its loop runs: the loop closes under it

    asyncio.run(leave_subscribed())
    hub.changed("gone")  # must not raise from the producer's thread
    hub.changed_all()
    held.__exit__(None, None, None)
