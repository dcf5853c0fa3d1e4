"""Warming the pre-forked launcher: the built-in demo task, run a few times in it before it
forks its first worker.

Python specialises the bytecode of a function once it has been called a few times, and
writes the specialised code into the function's code object. A worker forked from a cold
launcher runs the worker's code once: unspecialised, and each write that specialising and
warming make lands on a page it shares with the launcher, a copy-on-write fault. Run a few
times in the launcher first, that code is specialised once in the pages every worker
shares, and every module it imports is loaded. ``bench/bench_warmup.py`` measures it:
here a warm launcher's workers take 0.85× the page faults and 0.82–0.83× the CPU of a cold
one's (about 135 faults and 1.5 ms less a worker).

Only runyard's own code runs: the built-in ``demo`` task, never a plugin, in a temporary
workspace that is removed after. The launcher is left as it was: its title, its standard
streams (what the runs print goes to /dev/null), its open files, and one thread (the
progress timers a run starts are joined, bare threads included; one that would not end is
an error, and the launcher then refuses to fork).
"""

from __future__ import annotations

import _thread
import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from runyard.runtime.creation import create_task
from runyard.runtime.proctitle import kept_title
from runyard.runtime.taskrun import CancelSignal, flush_stdio, join_held_writes
from runyard.runtime.worker import WorkerPayload, run_payload
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace

WARM_RUNS = 10
THREAD_TIMEOUT = 5.0  # seconds for the runs' timer threads to end


def warm_worker(runs: int = WARM_RUNS) -> None:
    """Run the demo task ``runs`` times in this process; raises if one does not succeed."""
    threads = set(threading.enumerate())
    root = Path(tempfile.mkdtemp(prefix="runyard-warm-"))
    try:
        with kept_title(), _quiet_stdio():
            try:
                _run_demo(root, runs)
            finally:  # a timer may still write: join it before its folder and streams go
                _join_new_threads(threads)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run_demo(root: Path, runs: int) -> None:
    registry = TaskRegistry.load(plugins=False)
    target = registry.get("demo").target
    workspace = Workspace.open(root / "workspace", root / "logs")
    workspace.ensure()
    for _ in range(runs):
        status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
        payload = WorkerPayload(
            str(workspace.root), str(workspace.log_dir), status.task_id, status.run_id, target
        )
        code = run_payload(payload, CancelSignal(), release=True)
        if code != 0:
            raise RuntimeError(f"the demo task ended with exit code {code}")


def _join_new_threads(before: set[threading.Thread]) -> None:
    deadline = time.monotonic() + THREAD_TIMEOUT
    for thread in set(threading.enumerate()) - before:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            raise RuntimeError(f"the thread {thread.name} of a warm-up run did not end")
    if not join_held_writes(deadline - time.monotonic()):
        raise RuntimeError("a progress timer of a warm-up run did not end")
    # a timer's thread lives on for a moment after its work: the zygote forks only alone
    while _thread._count() > len(before) - 1:
        if time.monotonic() >= deadline:
            raise RuntimeError("a thread of a warm-up run did not end")
        time.sleep(0.001)


@contextlib.contextmanager
def _quiet_stdio() -> Iterator[None]:
    """File descriptors 1 and 2 go to /dev/null inside the block."""
    flush_stdio()
    null = os.open(os.devnull, os.O_WRONLY)
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        flush_stdio()
        for fd, target in zip(saved, (1, 2), strict=True):
            os.dup2(fd, target)
            os.close(fd)
        os.close(null)
