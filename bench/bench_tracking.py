"""What experiment tracking costs a task: logging many points, and nothing when unused.

    .venv/bin/python bench/bench_tracking.py [--points 100000] [--repeats 5] [--runs 60]

1. **log_metric throughput inside a real task run.** A task of this file runs a loop of
   ``--points`` iterations through a real supervisor and worker, once calling
   ``run.log_metric`` in each iteration and once not (runs alternate). Printed: the loop's
   seconds and the task's wall time (``started_at`` to ``finished_at``), medians of
   ``--repeats``; points a second; the cost of one point; the ratio of the wall times.
2. **The task path with tracking unused.** The built-in ``demo`` task (it logs nothing),
   submit to ``succeeded``, through two supervisors with the pre-forked launcher (the
   server's default), runs alternating between them: one as built, one whose workers have
   the tracking machinery taken out (a ``sitecustomize`` on their ``PYTHONPATH`` puts a
   do-nothing class in place of ``RunMetrics``: no intake thread, no final flush, no
   ``$RUNYARD_METRICS_FILE``). A probe task checks that each side is what it claims.
   Printed: p50 / p90 of each and the ratio of the medians.

Nothing is asserted on time (benchmarks are not tests).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from runyard.config import Settings
from runyard.runtime.liveness import wait_for_run
from runyard.runtime.supervisor import Supervisor
from runyard.tasks.base import Task, TaskInput, TaskOutput, TaskRun
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace

HERE = Path(__file__).resolve().parent
NO_TRACKING = '''
import runyard.runtime.taskrun as taskrun


class NoMetrics:
    """The tracking machinery taken out: every call does nothing."""

    def __init__(self, *args, **kwargs):
        pass

    def start(self):
        pass

    def close(self):
        pass

    def flush(self):
        pass


taskrun.RunMetrics = NoMetrics
'''


class LoopInput(TaskInput):
    points: int = 100_000
    log: bool = True


class LoopOutput(TaskOutput):
    seconds: float
    tracked: bool = False


class Loop(Task):
    """A loop of ``points`` iterations, logging a point in each when ``log``."""

    Input = LoopInput
    Output = LoopOutput

    def run(self, inputs: LoopInput, run: TaskRun) -> LoopOutput:
        total = 0.0
        start = time.perf_counter()
        if inputs.log:
            for step in range(inputs.points):
                total += step * 0.5
                run.log_metric("loss", total)
        else:
            for step in range(inputs.points):
                total += step * 0.5
        return LoopOutput(seconds=time.perf_counter() - start)


class Probe(Task):
    """Whether this worker names a metrics file to its processes (tracking in place)."""

    Output = LoopOutput

    def run(self, inputs: TaskInput, run: TaskRun) -> LoopOutput:
        return LoopOutput(seconds=0.0, tracked="RUNYARD_METRICS_FILE" in os.environ)


def epoch(stamp: str | None) -> float:
    assert stamp is not None
    return datetime.strptime(stamp.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def supervisor(root: Path, pythonpath: str) -> tuple[Supervisor, Workspace]:
    settings = Settings(
        workspace_dir=root / "ws", log_dir=root / "logs", prefork=True,
        worker_env={"PYTHONPATH": pythonpath},
    )  # fmt: skip
    ws = Workspace.open(settings.workspace_dir, settings.log_dir)
    registry = TaskRegistry.load(plugins=False)
    registry.add("bench_loop", "bench_tracking:Loop", plugin="bench")
    registry.add("bench_probe", "bench_tracking:Probe", plugin="bench")
    sup = Supervisor(settings, ws, registry)
    sup.start()
    return sup, ws


def run_once(sup: Supervisor, ws: Workspace, task: str, inputs: dict) -> tuple[float, dict]:
    """Seconds from submit to ``finished_at``, and the final status as JSON."""
    submitted = time.time()
    handle = sup.submit(task, inputs)
    status = wait_for_run(ws, handle.task_id, handle.run_id, poll_interval=0.002, timeout=300)
    if status.state != "succeeded":
        raise SystemExit(f"{task} ended {status.state}: {status.error}")
    return epoch(status.finished_at) - submitted, status.to_json()


def throughput(sup: Supervisor, ws: Workspace, points: int, repeats: int) -> None:
    loops: dict[bool, list[float]] = {True: [], False: []}
    walls: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(repeats):
        for log in (True, False):
            _, status = run_once(sup, ws, "bench_loop", {"points": points, "log": log})
            loops[log].append(status["result"]["seconds"])
            walls[log].append(epoch(status["finished_at"]) - epoch(status["started_at"]))
            if log:
                assert status["metrics"]["loss"]["count"] == points
    with_loop, without_loop = statistics.median(loops[True]), statistics.median(loops[False])
    with_wall, without_wall = statistics.median(walls[True]), statistics.median(walls[False])
    print(f"1. log_metric in a real task run, {points} points, median of {repeats}:")
    print(f"   loop     with {with_loop * 1000:8.1f} ms   without {without_loop * 1000:8.1f} ms")
    print(f"   task     with {with_wall * 1000:8.1f} ms   without {without_wall * 1000:8.1f} ms"
          f"   ratio {with_wall / without_wall:5.2f}")
    print(f"   {points / with_loop:,.0f} points/s logged; "
          f"{(with_loop - without_loop) / points * 1e6:.2f} µs a point; "
          f"10,000 points/s cost the task {(with_loop - without_loop) / points * 1e4 * 100:.1f} %"
          " of its time")


def quantiles(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"p50 {statistics.median(ordered) * 1000:7.2f} ms   p90 {p90 * 1000:7.2f} ms"


def unused(sides: dict[str, tuple[Supervisor, Workspace]], runs: int) -> None:
    for name, (sup, ws) in sides.items():
        _, status = run_once(sup, ws, "bench_probe", {})
        expected = name == "as built"
        if status["result"]["tracked"] is not expected:
            raise SystemExit(f"the {name} side's workers are not what it claims")
        for _ in range(5):  # warm the page cache and the zygotes
            run_once(sup, ws, "demo", {"x": 1, "y": 2})
    times: dict[str, list[float]] = {name: [] for name in sides}
    for n in range(runs):
        order = list(sides) if n % 2 == 0 else list(reversed(sides))
        for name in order:
            sup, ws = sides[name]
            times[name].append(run_once(sup, ws, "demo", {"x": n, "y": 1})[0])
    print(f"2. the demo task (logs nothing), submit -> succeeded, prefork, {runs} runs each,"
          " alternating:")
    for name, values in times.items():
        print(f"   {name:<20} {quantiles(values)}")
    built, bare = (statistics.median(values) for values in times.values())
    print(f"   ratio of the medians (as built / tracking taken out): {built / bare:5.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        patch = root / "no-tracking"
        patch.mkdir()
        (patch / "sitecustomize.py").write_text(NO_TRACKING)
        built = supervisor(root / "built", str(HERE))
        bare = supervisor(root / "bare", f"{patch}:{HERE}")
        try:
            throughput(*built, args.points, args.repeats)
            unused({"as built": built, "tracking taken out": bare}, args.runs)
        finally:
            built[0].stop()
            bare[0].stop()


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
