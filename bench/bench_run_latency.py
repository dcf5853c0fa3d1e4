"""Task run figures through the supervisor, with and without the pre-forked launcher.

    .venv/bin/python bench/bench_run_latency.py [--runs 50] [--burst 200] [--dir /path]

For each mode (fresh interpreter, prefork) it prints, for ``demo``:
  * submit -> running: from the submit call to the worker's ``started_at`` (p50 / p90)
  * run -> succeeded: from the submit call to ``finished_at`` (p50 / p90), one run at a time
  * throughput: ``--burst`` tasks submitted at once, succeeded tasks per second
Targets are in DESIGN section 8; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

from runyard.config import Settings
from runyard.runtime.liveness import wait_for_run
from runyard.runtime.supervisor import Supervisor
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace


def epoch(stamp: str | None) -> float:
    assert stamp is not None
    return datetime.strptime(stamp.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    p50 = statistics.median(ordered)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"p50 {p50 * 1000:7.1f} ms   p90 {p90 * 1000:7.1f} ms"


def sequential(sup: Supervisor, ws: Workspace, runs: int) -> tuple[list[float], list[float]]:
    to_running, to_succeeded = [], []
    for n in range(runs):
        submitted = time.time()
        handle = sup.submit("demo", {"x": n, "y": 1})
        status = wait_for_run(ws, handle.task_id, handle.run_id, poll_interval=0.005, timeout=60)
        if status.state != "succeeded":
            raise SystemExit(f"demo ended {status.state}: {status.error}")
        to_running.append(epoch(status.started_at) - submitted)
        to_succeeded.append(epoch(status.finished_at) - submitted)
    return to_running, to_succeeded


def burst(sup: Supervisor, ws: Workspace, count: int) -> float:
    started = time.time()
    handles = [sup.submit("demo", {"x": n, "y": 1}) for n in range(count)]
    while sup.active_count():
        time.sleep(0.02)  # coarse on purpose: the waiting must not compete for the CPU
    last = 0.0
    for handle in handles:
        status = ws.read_status(handle.task_id)
        if status is None or status.state != "succeeded":
            raise SystemExit(f"demo did not succeed: {status}")
        last = max(last, epoch(status.finished_at))
    return count / (last - started)


def measure(root: Path, prefork: bool, runs: int, count: int) -> None:
    settings = Settings(workspace_dir=root / "ws", log_dir=root / "logs", prefork=prefork)
    ws = Workspace.open(settings.workspace_dir, settings.log_dir)
    sup = Supervisor(settings, ws, TaskRegistry.load())
    began = time.perf_counter()
    sup.start()
    start_cost = time.perf_counter() - began
    try:
        sequential(sup, ws, 3)  # warm the page cache and the zygote
        to_running, to_succeeded = sequential(sup, ws, runs)
        rate = burst(sup, ws, count)
    finally:
        sup.stop()
    label = "prefork" if prefork else "fresh interpreter"
    print(f"== {label} (supervisor start {start_cost * 1000:.0f} ms, "
          f"max_concurrent_tasks={settings.max_concurrent_tasks})")
    print(f"  submit -> running     {quantiles(to_running)}   ({runs} runs)")
    print(f"  run -> succeeded      {quantiles(to_succeeded)}   ({runs} runs)")
    print(f"  throughput            {rate:7.1f} succeeded demo tasks/s   ({count} at once)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--dir", type=Path, default=None, help="where to put the workspaces")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for prefork in (False, True):
            measure(Path(tmp) / ("prefork" if prefork else "fresh"), prefork, args.runs,
                    args.burst)


if __name__ == "__main__":
    main()
