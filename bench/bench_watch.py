"""The index's watch feed on Linux against watchfiles', on the same workspace and writes.

    .venv/bin/python bench/bench_watch.py [--tasks 1000] [--probes 100]

Two feeds watch the same type folders from this process, each in a thread of its own, as
the repository's watcher places them (recursive, 15 ms debounce, 3 ms step):
:func:`runyard.repository.inotify.inotify_feed` (only the records' events) and
:func:`watchfiles.watch` (what the watcher used before, and still uses off Linux).

- **load**: ``--tasks`` demo tasks through a real server on 127.0.0.1 (``floor.http_round``,
  8 client threads), its workspace watched by both feeds. Prints, a task, the batches and
  changes each feed handed over and the CPU its threads spent (watchfiles' own reader
  thread included, from ``/proc``).
- **latency**: ``--probes`` atomic replaces of a ``status.json`` and as many lines appended
  to an ``events.jsonl``, 20 ms apart, in a folder of their own; prints the median and p90
  delay from each write to the batch that names it, for each feed.

Both feeds run at once, so they share the interpreter and the machine: the figures compare
them in the same minutes. What the extra events cost the processes that write and read the
files (the kernel queues an event in their system calls) is not here: ``floor.py`` and two
servers side by side show it. Every wait is bounded; nothing is asserted on time.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from floor import http_round  # noqa: E402
from floor_profile import thread_cpu  # noqa: E402

from runyard.repository.inotify import inotify_feed  # noqa: E402
from runyard.repository.watcher import DEBOUNCE_MS, STEP_MS, WAIT_MS  # noqa: E402
from runyard.workspace.identity import TASK_TYPES  # noqa: E402
from runyard.workspace.layout import RECORD_FILES  # noqa: E402
from serverproc import start_server  # noqa: E402

FEEDS = ("inotify_feed", "watchfiles")
PROBE_SPACING = 0.02


class Follower:
    """A thread handing each batch of one feed to its counters, and noting when it saw a
    path first after it was armed for it."""

    def __init__(self, kind: str, folders: list[str], stop: threading.Event) -> None:
        self.kind = kind
        self.batches = 0
        self.changes = 0
        self.seen: dict[str, float] = {}
        self.wanted: set[str] = set()
        self.tids: set[int] = set()
        self._lock = threading.Lock()
        self._feed = self._open(kind, folders, stop)
        next(self._feed)  # the watches are placed
        self.thread = threading.Thread(target=self._run, name=kind, daemon=True)

    @staticmethod
    def _open(kind: str, folders: list[str], stop: threading.Event) -> Iterator[Iterable]:
        if kind == "inotify_feed":
            return inotify_feed(
                folders, [], recursive=True, stop=stop, debounce_ms=DEBOUNCE_MS,
                step_ms=STEP_MS, wait_ms=WAIT_MS, names=RECORD_FILES,
            )  # fmt: skip
        import watchfiles

        return watchfiles.watch(
            *folders, watch_filter=None, debounce=DEBOUNCE_MS, step=STEP_MS,
            stop_event=stop, rust_timeout=WAIT_MS, yield_on_timeout=True,
            raise_interrupt=False, recursive=True,
        )  # fmt: skip

    def _run(self) -> None:
        self.tids.add(threading.get_native_id())
        for batch in self._feed:
            if not batch:
                continue
            now = time.monotonic()
            with self._lock:
                self.batches += 1
                self.changes += len(batch)
                for _, path in batch:
                    if path in self.wanted and path not in self.seen:
                        self.seen[path] = now

    def arm(self, path: str) -> None:
        with self._lock:
            self.wanted.add(path)
            self.seen.pop(path, None)

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.batches, self.changes


def cpu_of(followers: dict[str, Follower]) -> dict[str, float]:
    """CPU seconds of each feed's threads; watchfiles' reader thread (named by its crate)
    counts as its feed's."""
    found = thread_cpu(os.getpid())
    cpu = dict.fromkeys(followers, 0.0)
    for tid, (name, seconds) in found.items():
        for kind, follower in followers.items():
            if tid in follower.tids or (kind == "watchfiles" and name.startswith("notify-rs")):
                cpu[kind] += seconds
    return cpu


def load(root: Path, tasks: int) -> None:
    srv = start_server(root / "server", config={"max_concurrent_tasks": 8})
    stop = threading.Event()
    try:
        http_round(srv, 20, "warm", 8)
        folders = [str(srv.workspace / kind) for kind in sorted(TASK_TYPES)]
        followers = {kind: Follower(kind, folders, stop) for kind in FEEDS}
        for follower in followers.values():
            follower.thread.start()
        time.sleep(0.5)
        before = {kind: f.counts() for kind, f in followers.items()}
        cpu_before = cpu_of(followers)
        took = http_round(srv, tasks, "load", 8)
        time.sleep(0.5)  # the last batches
        cpu_after = cpu_of(followers)
        print(f"load: {tasks} demo tasks through a server in {took:.1f} s ({tasks / took:.0f}/s)")
        print(f"  {'':14s}{'batches a task':>16s}{'changes a task':>16s}{'CPU ms a task':>15s}")
        for kind, follower in followers.items():
            batches, changes = follower.counts()
            spent = (cpu_after[kind] - cpu_before[kind]) * 1000 / tasks
            print(f"  {kind:14s}{(batches - before[kind][0]) / tasks:16.2f}"
                  f"{(changes - before[kind][1]) / tasks:16.2f}{spent:15.3f}")  # fmt: skip
    finally:
        stop.set()
        srv.stop()


def latency(root: Path, probes: int, stop: threading.Event) -> None:
    task = root / "probe" / "base" / "base#demo#probe"
    task.mkdir(parents=True)
    (task / "events.jsonl").write_text("")
    followers = {kind: Follower(kind, [str(task.parent)], stop) for kind in FEEDS}
    for follower in followers.values():
        follower.thread.start()
    delays: dict[str, dict[str, list[float]]] = {k: {"status": [], "line": []} for k in FEEDS}
    for number in range(probes):
        for what, path in (("status", task / "status.json"), ("line", task / "events.jsonl")):
            for follower in followers.values():
                follower.arm(str(path))
            wrote = time.monotonic()
            if what == "status":
                tmp = task / f".status.json.{number}.tmp"
                tmp.write_text(f'{{"n": {number}}}')
                os.replace(tmp, path)
            else:
                with path.open("a") as lines:
                    lines.write(f'{{"n": {number}}}\n')
            deadline = wrote + 2.0
            while time.monotonic() < deadline and any(
                str(path) not in f.seen for f in followers.values()
            ):
                time.sleep(0.001)
            for kind, follower in followers.items():
                if str(path) in follower.seen:
                    delays[kind][what].append((follower.seen[str(path)] - wrote) * 1000)
            time.sleep(PROBE_SPACING)
    print(f"latency: {probes} status replaces and {probes} appended lines, write -> batch (ms)")
    for kind in FEEDS:
        cells = []
        for what in ("status", "line"):
            got = sorted(delays[kind][what])
            if not got:
                cells.append(f"{what}: none seen")
                continue
            p90 = got[min(len(got) - 1, int(len(got) * 0.9))]
            cells.append(f"{what} p50 {statistics.median(got):5.1f} p90 {p90:5.1f} "
                         f"({len(got)} seen)")  # fmt: skip
        print(f"  {kind:14s}" + "   ".join(cells))


def out_of_time(signum: int, frame: object) -> None:
    raise SystemExit("bench_watch.py ran out of its time limit")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--probes", type=int, default=100)
    parser.add_argument("--dir", type=Path, default=None, help="where the workspaces go")
    parser.add_argument("--time-limit", type=int, default=600, help="seconds for the whole run")
    args = parser.parse_args()
    if sys.platform != "linux":
        raise SystemExit("bench_watch.py compares inotify feeds: Linux only")
    signal.signal(signal.SIGALRM, out_of_time)
    signal.alarm(args.time_limit)
    stop = threading.Event()
    with tempfile.TemporaryDirectory(prefix="runyard-watch-", dir=args.dir) as tmp:
        load(Path(tmp), args.tasks)
        try:
            latency(Path(tmp), args.probes, stop)
        finally:
            stop.set()


if __name__ == "__main__":
    main()
