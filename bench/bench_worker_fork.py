"""What one forked worker costs, phase by phase, against the same run in-process.

    .venv/bin/python bench/bench_worker_fork.py [--runs 300] [--dir /path]

This process is set up as the pre-forked launcher is (the worker's modules preloaded, the
demo task run in it by :func:`runyard.runtime.warmup.warm_worker`, ``gc.freeze()``), and
creates ``--runs`` demo tasks in a temporary workspace. Then, one at a time:

- **forked**: each run in a child forked from here, as the launcher's ``_spawn`` forks one
  (its log, stdin, a new session, its environment, ``runyard.runtime.worker``'s
  ``main()``). The child notes its CPU time and page faults when its first line of Python
  runs, before and after the worker's ``main()``; the rest (its exit) comes from the reap.
- **in-process**: the same number of runs, each a ``run_payload`` call in this process,
  no fork: what the worker's own work costs.
- **fork and exit**: a child that exits at once, from this process and from a bare
  interpreter (``python -c``), so the cost of the launcher's size shows.

Prints the medians a run (CPU ms, user and system, and minor page faults). No cgroup, no
server: the figures are the worker's and the fork's alone. Every run must succeed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from runyard.executors.zygote import become_environment, open_log, run_module, stdin_fd
from runyard.runtime.creation import create_task
from runyard.runtime.proctitle import prepare_titles
from runyard.runtime.taskrun import CancelSignal
from runyard.runtime.warmup import warm_worker
from runyard.runtime.worker import WorkerPayload, run_payload
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace

WORKER = "runyard.runtime.worker"
BARE_FORKS = """
import os, resource, sys
n = int(sys.argv[1])
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(usage.ru_utime + usage.ru_stime, usage.ru_minflt)
"""


def mark() -> tuple[float, int]:
    return time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def children() -> tuple[float, float, int]:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime, usage.ru_stime, usage.ru_minflt


def forked_run(workspace: Workspace, payload: WorkerPayload, env: dict[str, str]) -> dict:
    """Run ``payload`` in a child forked from here; its marks and what its reap cost."""
    log_fd = open_log(str(workspace.log_dir / f"{payload.run_id}.log"))
    in_fd = stdin_fd(payload.dump())
    marks_r, marks_w = os.pipe()
    before = children()
    pid = os.fork()
    if pid == 0:
        first = mark()
        code = 1
        try:
            os.close(marks_r)
            os.setsid()
            for target, source in ((0, in_fd), (1, log_fd), (2, log_fd)):
                os.dup2(source, target)
            os.close(in_fd)
            os.close(log_fd)
            become_environment(env)
            sys.argv = [WORKER]
            setup = mark()
            code = run_module(WORKER)
            ran = mark()
            os.write(marks_w, json.dumps([first, setup, ran]).encode())
        except BaseException:
            traceback.print_exc()  # into the run's log
        finally:
            os._exit(code)
    os.close(marks_w)
    os.close(log_fd)
    os.close(in_fd)
    with os.fdopen(marks_r, "rb") as marks:
        raw = marks.read()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0 or not raw:
        log = (workspace.log_dir / f"{payload.run_id}.log").read_text(errors="replace")
        raise SystemExit(f"the forked run of {payload.task_id} failed ({status}):\n{log[-2000:]}")
    after = children()
    first, setup, ran = json.loads(raw)
    cpu, faults = (after[0] - before[0] + after[1] - before[1]) * 1000, after[2] - before[2]
    return {
        "cpu": cpu,
        "user": (after[0] - before[0]) * 1000,
        "system": (after[1] - before[1]) * 1000,
        "faults": faults,
        "to first line": (first[0] * 1000, first[1]),
        "setup": ((setup[0] - first[0]) * 1000, setup[1] - first[1]),
        "worker main()": ((ran[0] - setup[0]) * 1000, ran[1] - setup[1]),
        "exit": (cpu - ran[0] * 1000, faults - ran[1]),
    }


def in_process_run(payload: WorkerPayload) -> dict:
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.process_time()
    if run_payload(payload, CancelSignal(), release=True) != 0:
        raise SystemExit(f"the in-process run of {payload.task_id} failed")
    took = time.process_time() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "cpu": took * 1000,
        "user": (after.ru_utime - before.ru_utime) * 1000,
        "system": (after.ru_stime - before.ru_stime) * 1000,
        "faults": after.ru_minflt - before.ru_minflt,
    }


def fork_exit_here(count: int) -> tuple[float, float]:
    before = children()
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    after = children()
    return (after[0] - before[0] + after[1] - before[1]) * 1000 / count, (
        after[2] - before[2]
    ) / count


def fork_exit_bare(count: int) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, "-c", BARE_FORKS, str(count)],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    cpu, faults = out.stdout.split()
    return float(cpu) * 1000 / count, int(faults) / count


def summary(rows: list[dict]) -> dict[str, Any]:
    """Medians a run; user and system as means (the kernel splits a process's CPU between
    them by sampling at its clock ticks, too coarse for one short run, fair over many)."""
    found: dict[str, Any] = {}
    for key in rows[0]:
        if key in ("user", "system"):
            found[key] = statistics.fmean(row[key] for row in rows)
        elif isinstance(rows[0][key], tuple):
            found[key] = tuple(statistics.median(row[key][i] for row in rows) for i in (0, 1))
        else:
            found[key] = statistics.median(row[key] for row in rows)
    return found


def payloads(workspace: Workspace, registry: TaskRegistry, count: int) -> list[WorkerPayload]:
    target = registry.get("demo").target
    made = []
    for index in range(count):
        status = create_task(workspace, registry, "demo", {"x": index, "y": 1})
        made.append(
            WorkerPayload(
                str(workspace.root), str(workspace.log_dir), status.task_id, status.run_id, target
            )
        )
    return made


def quiet_stdout() -> int:
    """Point fd 1 at /dev/null (the in-process runs log there); the saved fd."""
    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    return saved


def report(forked: dict[str, Any], here: dict[str, Any], forks: dict[str, Any]) -> None:
    print(f"\n{forks['runs']} demo runs each; CPU and faults: medians a run, user and system:"
          " means")  # fmt: skip
    print(f"  {'':44} {'CPU ms':>8} {'user':>7} {'system':>7} {'faults':>7}")
    for label, row in (("forked worker", forked), ("in-process run (no fork)", here)):
        print(f"  {label:44} {row['cpu']:8.2f} {row['user']:7.2f} {row['system']:7.2f} "
              f"{row['faults']:7.0f}")  # fmt: skip
        for phase in ("to first line", "setup", "worker main()", "exit"):
            if phase in row:
                ms, faults = row[phase]
                print(f"    {phase:42} {ms:8.2f} {'':7} {'':7} {faults:7.0f}")
    for label, (cpu, faults) in (("fork and exit, from this process", forks["here"]),
                                 ("fork and exit, from a bare interpreter", forks["bare"])):  # fmt: skip
        print(f"  {label:44} {cpu:8.2f} {'':7} {'':7} {faults:7.0f}")
    print(f"  this process (as the launcher after its warm-up): {forks['rss']} resident")


def out_of_time(signum: int, frame: object) -> None:
    raise SystemExit("out of time (--time-limit)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--dir", type=Path, default=None, help="where the workspace goes")
    parser.add_argument("--time-limit", type=int, default=600, help="seconds for the whole run")
    args = parser.parse_args()
    signal.signal(signal.SIGALRM, out_of_time)
    signal.alarm(args.time_limit)
    prepare_titles()  # as the launcher does, before any child changes its environment
    warm_worker()
    registry = TaskRegistry.load(plugins=False)
    with tempfile.TemporaryDirectory(prefix="runyard-worker-fork-", dir=args.dir) as tmp:
        workspace = Workspace.open(Path(tmp) / "workspace", Path(tmp) / "logs")
        workspace.ensure()
        to_fork = payloads(workspace, registry, args.runs)
        to_run = payloads(workspace, registry, args.runs)
        gc.collect()
        gc.freeze()  # as the launcher does before its first fork
        env = dict(os.environ)
        forked = summary([forked_run(workspace, payload, env) for payload in to_fork])
        saved = quiet_stdout()
        try:
            here = summary([in_process_run(payload) for payload in to_run])
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        for payload in to_fork + to_run:
            status = workspace.read_status(payload.task_id)
            if status is None or status.state != "succeeded":
                raise SystemExit(f"{payload.task_id} did not succeed")
        rss = Path("/proc/self/status").read_text().split("VmRSS:")[1].splitlines()[0].strip()
        forks = {"runs": args.runs, "here": fork_exit_here(args.runs),
                 "bare": fork_exit_bare(args.runs), "rss": rss}  # fmt: skip
        report(forked, here, forks)


if __name__ == "__main__":
    main()
