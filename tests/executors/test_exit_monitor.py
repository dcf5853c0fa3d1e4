"""The exit monitor's thread: what its own callbacks ask for is done without a wake-up."""

from __future__ import annotations

import select
import subprocess
import threading

from runyard.executors.pidwatch import ExitMonitor


def test_a_watch_and_a_timer_asked_for_on_the_monitors_thread_need_no_wake_up() -> None:
    exits: list[str] = []
    exited = threading.Event()
    fired = threading.Event()
    pipe_after: list[bool] = []

    def on_exit(key: str, pidfd: int | None) -> None:
        exits.append(key)
        exited.set()

    monitor = ExitMonitor(on_exit)
    child = subprocess.Popen(["sleep", "0.3"])

    def from_the_monitor() -> None:  # runs on the monitor's thread, as a launch does
        monitor.watch("child", child.pid)
        monitor.call_later(0.05, fired.set)
        readable, _, _ = select.select([monitor._wake_r], [], [], 0)
        pipe_after.append(bool(readable))

    monitor.start()
    try:
        monitor.call_later(0.0, from_the_monitor)  # from this thread: it wakes the monitor
        assert fired.wait(10), "a timer set on the monitor's thread never fired"
        assert exited.wait(10), "an exit watched from the monitor's thread was never seen"
        assert exits == ["child"] and pipe_after == [False]
    finally:
        monitor.stop()
        child.wait(10)


def test_a_watch_from_another_thread_wakes_a_monitor_waiting_for_ever() -> None:
    exited = threading.Event()
    monitor = ExitMonitor(lambda key, pidfd: exited.set())
    monitor.start()
    child = subprocess.Popen(["sleep", "0.1"])
    try:
        monitor.watch("child", child.pid)  # the monitor selects with no timeout meanwhile
        assert exited.wait(10)
    finally:
        monitor.stop()
        child.wait(10)
