"""The supervisor's queue passes over capped owners instead of stopping at them."""

from __future__ import annotations

from runyard.runtime.fairqueue import FairQueue


def test_arrival_order_wherever_the_caps_allow() -> None:
    queue = FairQueue()
    for i in range(3):
        queue.append(f"run-{i}", f"r{i}", "session-a")
    queue.append("admin", "ra", None)
    queue.append("other", "rb", "session-b")
    assert len(queue) == 5
    assert queue.pop_next({"session-a"}) == ("admin", "ra")  # behind three capped entries
    assert queue.pop_next({"session-a"}) == ("other", "rb")
    assert queue.pop_next({"session-a"}) is None  # only capped work is left, none lost
    assert len(queue) == 3
    assert [queue.pop_next() for _ in range(3)] == [
        ("run-0", "r0"),
        ("run-1", "r1"),
        ("run-2", "r2"),
    ]
    assert queue.pop_next() is None and len(queue) == 0


def test_a_cancel_takes_the_entry_from_its_owner() -> None:
    queue = FairQueue()
    queue.append("a", "r1", "session-a")
    queue.append("b", "r2", None)
    assert queue.take("a") == ("a", "r1")
    assert queue.take("a") is None
    assert len(queue) == 1 and queue.pop_next({None}) is None
    assert queue.pop_next() == ("b", "r2")
