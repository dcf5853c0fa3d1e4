"""What warming the pre-forked launcher saves each worker it forks.

    .venv/bin/python bench/bench_warmup.py [--workers 300] [--rounds 5] [--dir DIR]

Each round starts two launchers, one after the other, as the server's does: a process forked
from this one that has imported the worker and the built-in tasks and frozen its heap
(``gc.freeze``). One is cold; the other first runs
:func:`runyard.runtime.warmup.warm_worker`, as the real launcher does. Each then forks
``--workers`` workers one at a time, each running one ``demo`` task of a workspace under
``--dir`` from its ``queued`` status to ``succeeded`` (``run_payload``, what a forked worker
runs), and reports its children's CPU and minor page faults. Prints both, a worker, with the
median of the rounds and the warm/cold ratio; cold and warm alternate, so a machine that
slows down in the run weighs on both. Use a tmpfs ``--dir`` (``/dev/shm``) to leave out the
disk. Nothing is asserted on time.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import runyard.tasks.builtin.demo  # noqa: F401 - the launcher preloads the built-in tasks
from runyard.runtime.creation import create_task
from runyard.runtime.taskrun import CancelSignal
from runyard.runtime.warmup import warm_worker
from runyard.runtime.worker import WorkerPayload, run_payload
from runyard.tasks.registry import TaskRegistry
from runyard.workspace.layout import Workspace


def payloads(workspace: Workspace, registry: TaskRegistry, count: int) -> list[WorkerPayload]:
    target = registry.get("demo").target
    made = []
    for _ in range(count):
        status = create_task(workspace, registry, "demo", {"x": 1, "y": 2})
        made.append(WorkerPayload(str(workspace.root), str(workspace.log_dir),
                                  status.task_id, status.run_id, target))  # fmt: skip
    return made


def launcher(work: list[WorkerPayload], warm: bool, report: int) -> None:
    """In a forked child: warm or not, freeze, fork each worker in turn, report, exit."""
    if warm:
        warm_worker()
    gc.collect()
    gc.freeze()
    null = os.open(os.devnull, os.O_WRONLY)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    failed = 0
    for payload in work:
        pid = os.fork()
        if pid == 0:
            os.dup2(null, 1)
            os.dup2(null, 2)
            os._exit(run_payload(payload, CancelSignal()))
        _, status = os.waitpid(pid, 0)
        failed += status != 0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    figures = {"cpu_ms": cpu * 1000 / len(work),
               "faults": (after.ru_minflt - before.ru_minflt) / len(work), "failed": failed}  # fmt: skip
    os.write(report, json.dumps(figures).encode())


def one_launcher(work: list[WorkerPayload], warm: bool) -> dict[str, float]:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        code = 1
        try:
            launcher(work, warm, write_end)
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        raw = pipe.read()
    _, status = os.waitpid(pid, 0)
    if status != 0 or not raw:
        raise SystemExit(f"the {'warm' if warm else 'cold'} launcher failed ({status})")
    figures: dict[str, float] = json.loads(raw)
    if figures["failed"]:
        raise SystemExit(f"{figures['failed']:.0f} demo tasks did not succeed")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where the workspace goes")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-warmup-", dir=args.dir))
    try:
        registry = TaskRegistry.load(plugins=False)
        workspace = Workspace.open(root / "workspace", root / "logs")
        workspace.ensure()
        runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
        for _ in range(args.rounds):
            for warm in (False, True):
                runs[warm].append(one_launcher(payloads(workspace, registry, args.workers), warm))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{args.workers} demo workers a launcher, median of {args.rounds} rounds, "
          f"Python {sys.version.split()[0]}")  # fmt: skip
    print(f"  {'':16} {'cold':>8} {'warm':>8} {'warm/cold':>10}")
    for key, label in (("cpu_ms", "CPU ms a worker"), ("faults", "faults a worker")):
        cold = statistics.median(run[key] for run in runs[False])
        warm = statistics.median(run[key] for run in runs[True])
        print(f"  {label:16} {cold:8.2f} {warm:8.2f} {warm / cold:10.2f}")


if __name__ == "__main__":
    main()
