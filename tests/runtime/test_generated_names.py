"""Unnamed tasks get readable names that never collide, however many submit at once."""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from runyard.runtime import creation
from runyard.runtime.creation import create_task
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace

READABLE = re.compile(r"^base#demo#demo-[a-z]+-[a-z]+-\d+$")
CLASH = "demo-calm-otter-1"
THREADS = 16


def test_parallel_submits_that_draw_the_same_name_all_get_their_own(
    workspace: Workspace, registry: TaskRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every first draw is the same name (the worst luck): one submit takes it, each of
    the others finds it taken under the id's claim and draws again."""
    drawn = creation.generate_task_name
    monkeypatch.setattr(
        creation, "generate_task_name",
        lambda task, attempt: CLASH if attempt == 0 else drawn(task, attempt),
    )  # fmt: skip
    start = threading.Barrier(THREADS)

    def submit(_: int) -> str:
        start.wait()
        return create_task(workspace, registry, "demo", {"x": 1, "y": 2}).task_id

    with ThreadPoolExecutor(THREADS) as pool:
        ids = list(pool.map(submit, range(THREADS)))
    assert len(set(ids)) == THREADS
    assert ids.count(f"base#demo#{CLASH}") == 1
    for task_id in ids:
        assert READABLE.fullmatch(task_id), task_id
        assert workspace.read_status(task_id) is not None  # each folder is its own task
