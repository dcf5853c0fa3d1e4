"""TaskRepository figures at 10,000 and 100,000 generated task folders.

    .venv/bin/python bench/bench_repository.py [--sizes 10000 100000] [--mode auto]

Prints cold-start time, memory, get / page / graph / context latencies (median, p90) and
how long a change written to a status file takes to show through the index. Targets are
in DESIGN section 8; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from runyard.repository import TaskRepository
from runyard.workspace import Workspace
from runyard.workspace.atomic import write_json_atomic
from runyard.workspace.events import append_event
from runyard.workspace.identity import TaskType

TYPES = [t.value for t in TaskType]
# A history: mostly finished tasks, a few percent running or waiting for a slot.
STATES = ["succeeded"] * 70 + ["failed"] * 16 + ["cancelled"] * 10 + ["running"] + ["queued"] * 3


def write_file(path: str, data: dict[str, object]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, json.dumps(data, separators=(",", ":")).encode())
    finally:
        os.close(fd)


def created_at(i: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(1_767_225_600 + i)) + f".{i % 997:06d}Z"


def parents_for(i: int, ids: list[str], rng: random.Random) -> str:
    if i % 3 or not ids:
        return ""
    if i % 97 == 0:
        return "base#demo#deleted-upstream"
    picks = {ids[rng.randrange(max(0, len(ids) - 50), len(ids))] for _ in range(1 + i % 2)}
    return ",".join(sorted(picks))


def generate(root: Path, count: int, seed: int = 7) -> list[str]:
    """``count`` task folders: mixed states, lineage to recent tasks, metadata on success."""
    rng = random.Random(seed)
    ids: list[str] = []
    for task_type in TYPES:
        (root / task_type).mkdir(parents=True, exist_ok=True)
    for i in range(count):
        task_type = TYPES[i % len(TYPES)]
        task_id = f"{task_type}#demo#t{i:07d}"
        folder = root / task_type / task_id
        folder.mkdir()
        state = STATES[rng.randrange(len(STATES))]
        sources = parents_for(i, ids, rng)
        write_file(str(folder / "status.json"), status_of(task_id, task_type, state, sources, i))
        if state == "succeeded":
            write_file(str(folder / "metadata.json"), metadata_of(task_id, task_type, sources, i))
        ids.append(task_id)
    return ids


def status_of(task_id: str, task_type: str, state: str, sources: str, i: int) -> dict:
    at = created_at(i)
    return {
        "task_id": task_id,
        "run_id": f"{i:032x}",
        "task_type": task_type,
        "task_name": "demo",
        "state": state,
        "config": {"task_name": task_id.rsplit("#", 1)[1], "source_tasks": sources, "x": i, "y": 2},
        "created_at": at,
        "started_at": at,
        "finished_at": at,
        "pid": None,
        "exit_code": 0,
        "error": "",
        "result": {"value": i + 2},
        "steps": [{"name": "compute", "started_at": at, "finished_at": at, "percentage": 100.0}],
        "log_path": f"/logs/{task_type}/{task_id}/{i:032x}.log",
    }


def metadata_of(task_id: str, task_type: str, sources: str, i: int) -> dict:
    return {
        "task_id": task_id,
        "reg_name": "demo",
        "created_at": created_at(i),
        "task_type": task_type,
        "input_params": {"task_name": task_id.rsplit("#", 1)[1], "source_tasks": sources, "x": i},
        "output_params": {"value": i + 2},
    }


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def inotify_watches() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fdinfo"):
        try:
            text = Path(f"/proc/self/fdinfo/{fd}").read_text()
        except OSError:
            continue
        count += text.count("inotify wd:")
    return count


def cold_start(ws: Workspace, mode: str) -> str:
    repo = TaskRepository(ws, watch_mode=mode)
    start = time.perf_counter()
    repo.start()
    took = time.perf_counter() - start
    watches = inotify_watches()
    repo.stop()
    return f"{took:8.3f} s  ({mode} watch, {watches:,} inotify watches)"


def timed(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.9)]


def report(label: str, figures: tuple[float, float]) -> None:
    print(f"  {label:<34} median {figures[0]:8.3f} ms   p90 {figures[1]:8.3f} ms")


def bench_queries(repo: TaskRepository, ids: list[str], rng: random.Random) -> None:
    report("get", timed(lambda: repo.get(rng.choice(ids)), 2000))
    report("list_statuses first page (50)", timed(lambda: repo.list_statuses(limit=50), 200))
    report("  state=running", timed(lambda: repo.list_statuses(limit=50, state="running"), 200))
    report(
        "  task_type=etl state=failed",
        timed(lambda: repo.list_statuses(limit=50, task_type="etl", state="failed"), 200),
    )
    _, cursor = repo.list_statuses(limit=50 * 100)
    report(
        "  page after 5,000 rows", timed(lambda: repo.list_statuses(limit=50, cursor=cursor), 200)
    )
    report("graph", timed(lambda: repo.graph(rng.choice(ids)), 500))
    report("context", timed(lambda: repo.context(rng.choice(ids)), 500))
    report("list_ids (all)", timed(repo.list_ids, 3))


def bench_changes(repo: TaskRepository, ws: Workspace, rng: random.Random) -> None:
    """Writes to running tasks (the ones workers write to; a sparse watch follows only those)."""
    running = [status.task_id for status in repo.list_statuses(state="running")[0]]
    seen = threading.Event()
    repo.subscribe(lambda task_id, name: seen.set() if name == "events.jsonl" else None)
    visible, callbacks = [], []
    for n in range(50):
        task_id = rng.choice(running)
        status = repo.get(task_id)
        assert status is not None
        status.error = f"change {n}"
        start = time.perf_counter()
        write_json_atomic(ws.status_path(task_id), status.to_json(), fsync=False)
        while (current := repo.peek(task_id)) is None or current.error != f"change {n}":
            time.sleep(0.0002)
        visible.append((time.perf_counter() - start) * 1000)
        seen.clear()
        start = time.perf_counter()
        append_event(ws.events_path(task_id), {"kind": "progress", "name": "x", "percentage": n})
        seen.wait(2)
        callbacks.append((time.perf_counter() - start) * 1000)
    for label, samples in (
        ("status write -> index", visible),
        ("event line -> callback", callbacks),
    ):
        samples.sort()
        report(label, (statistics.median(samples), samples[int(len(samples) * 0.9)]))


def run(count: int, mode: str) -> None:
    rng = random.Random(1)
    with tempfile.TemporaryDirectory(prefix="runyard-bench-") as tmp:
        ws = Workspace.open(Path(tmp) / "ws", Path(tmp) / "logs")
        start = time.perf_counter()
        ids = generate(ws.root, count)
        os.sync()
        # A server starts on a workspace at rest: folders written within the last second
        # are read twice by design (see TaskRepository._catch_up), so let a second pass.
        time.sleep(1.1)
        print(f"\n{count:,} task folders (generated in {time.perf_counter() - start:.1f} s)")
        before = rss_mb()
        scan_only = TaskRepository(ws)
        start = time.perf_counter()
        scan_only.start(watch=False)
        took = time.perf_counter() - start
        print(f"  index build, no watching (1st read) {took:7.3f} s")
        print(f"  index memory (RSS growth)          {rss_mb() - before:8.1f} MB")
        del scan_only
        repo = TaskRepository(ws, watch_mode=mode)
        start = time.perf_counter()
        repo.start()
        took = time.perf_counter() - start
        print(
            f"  cold start                         {took:8.3f} s  ({repo.watch_mode} watch,"
            f" {inotify_watches():,} inotify watches)"
        )
        other = "sparse" if repo.watch_mode == "recursive" else "recursive"
        try:
            bench_queries(repo, ids, rng)
            bench_changes(repo, ws, rng)
        finally:
            repo.stop()
        print(f"  cold start, {other + ' watch':<22} {cold_start(ws, other)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--mode", default="auto", choices=["auto", "recursive", "sparse"])
    args = parser.parse_args()
    for count in args.sizes:
        run(count, args.mode)


if __name__ == "__main__":
    main()
