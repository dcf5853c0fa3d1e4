"""runyard next to AxonX 0.2.2: the same HTTP workload on both servers, a table of both.

    .venv/bin/python bench/compare.py [--quick] [--rounds 1] [--markdown]

Needs a Python 3.12 for AxonX (see bench/compare_servers.py; without one only runyard
runs). Each section runs on fresh servers on 127.0.0.1, one system after the other, the
order alternating each round; a figure is the median over the rounds. Both get the same
requests through the seed's Job API with its default poll intervals (wait_task 1 s,
stream_task 0.5 s) and their own default settings (runyard runs 8 tasks at once, AxonX
starts every submitted task at once):

* submit -> running and finished -> wait returns: one ``demo`` at a time (p50 / p90);
* SSE: ``stream_task/events`` on a demo task just submitted, from each progress event's own
  time stamp to its arrival, counting only events written after the stream connected (so
  that a runyard demo starts after that, its 8 slots are first taken by ``sleep 1``
  commands; AxonX starts a task in a fresh interpreter, later than that anyway);
* throughput and peak memory (PSS of the server and every process under it, sampled) for
  ``--counts`` demo tasks submitted from 4 connections, then waited for;
* at ``--scale`` finished tasks (folders cloned from one real task of each system): the
  first start (port open, first complete ``list_task_ids``), lists, ``get_task_graph``,
  ``status``, the server's peak RSS, a restart; and ``read_task_log`` windows (tail, and
  64 KiB in the middle) of a task whose log was grown to ``--log-mib``.

Every wait is bounded: a section past ``--phase-timeout`` or a tree past
``--memory-cap-mib`` is stopped and its cell says so. Nothing is asserted on time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from compare_scale import scale
from compare_servers import (
    TOKEN,
    Api,
    JobError,
    MemoryWatch,
    Server,
    axonx_venv,
    epoch,
    launch,
    submit_demo,
    wait_for,
)

Cell = float | str


class Results:
    """Cells by row and system, in order; a section that stopped fills its rows with why."""

    def __init__(self) -> None:
        self.cells: dict[str, dict[str, list[Cell]]] = {}
        self.section_of: dict[str, str] = {}
        self.sections: list[str] = []
        self.stopped: dict[tuple[str, str], str] = {}

    def add(self, section: str, system: str, found: dict[str, Cell]) -> None:
        self._seen(section)
        for row, cell in found.items():
            self.section_of.setdefault(row, section)
            self.cells.setdefault(row, {}).setdefault(system, []).append(cell)

    def stop(self, section: str, system: str, why: str) -> None:
        self._seen(section)
        self.stopped.setdefault((section, system), why)

    def _seen(self, section: str) -> None:
        if section not in self.sections:
            self.sections.append(section)

    def rows(self) -> list[str]:
        """Each section's rows; a section no system finished has one row, its name."""
        found = []
        for section in self.sections:
            found += [r for r in self.cells if self.section_of[r] == section] or [section]
        return found

    def cell(self, row: str, system: str) -> Cell:
        if system in self.cells.get(row, {}):
            return summary(self.cells[row][system])
        return self.stopped.get((self.section_of.get(row, row), system), "—")


RUNYARD_SLOTS = 8  # max_concurrent_tasks by default


class Stopped(Exception):
    """A section that did not finish within its bounds; the message is its table cell."""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# live sections: latency and SSE, throughput


def latency(server: Server, runs: int, timeout: float) -> dict[str, Cell]:
    api = Api(server.port)
    running, waited = [], []
    for index in range(3 + runs):  # the first three warm the server and its launcher
        submitted = time.time()
        status = wait_for(api, submit_demo(api, index, timeout), timeout)
        returned = time.time()
        if index >= 3:
            running.append((epoch(status["started_at"]) - submitted) * 1000)
            waited.append((returned - epoch(status["finished_at"])) * 1000)
    api.close()
    return {
        "submit → running p50 (ms)": pct(running, 0.5),
        "submit → running p90 (ms)": pct(running, 0.9),
        "finished → wait returns p50 (ms)": pct(waited, 0.5),
    }


def sse_delays(server: Server, timeout: float) -> list[float]:
    """Follow a demo task's events from its submit on; the delays of those written after."""
    api = Api(server.port)
    fillers = [dict(api.call("submit", timeout=timeout, task="command", command="sleep 1"))
               for _ in range(RUNYARD_SLOTS if server.name == "runyard" else 0)]  # fmt: skip
    handles = [*fillers, submit_demo(api, 0, timeout)]
    delays: list[float] = []
    body = {"arguments": {"task_id": handles[-1]["task_id"]}}
    headers = {"authorization": f"Bearer {TOKEN}", "accept": "text/event-stream"}
    url = f"http://127.0.0.1:{server.port}/jobs/stream_task/events"
    with (
        httpx.Client(timeout=timeout) as client,
        client.stream("POST", url, json=body, headers=headers) as reply,
    ):
        connected = time.time()
        for line in reply.iter_lines():
            if not line.startswith("data:"):
                continue
            received = time.time()
            event = json.loads(line[5:])
            if event.get("kind") == "result":
                break
            written = written_at(event)
            if event.get("kind") == "progress" and written > connected:
                delays.append((received - written) * 1000)
    for handle in handles:
        wait_for(api, handle, timeout)
    api.close()
    return delays


def written_at(event: dict[str, Any]) -> float:
    stamps = [event.get(key) for key in ("started_at", "finished_at", "updated_at")]
    return max((epoch(s) for s in stamps if isinstance(s, str)), default=0.0)


def sse(server: Server, runs: int, timeout: float) -> dict[str, Cell]:
    delays: list[float] = []
    for _ in range(runs):
        delays += sse_delays(server, timeout)
    if not delays:
        return {"SSE progress written → received p50 (ms)": "— (no event after connecting)"}
    return {
        "SSE progress written → received p50 (ms)": pct(delays, 0.5),
        "SSE progress written → received p90 (ms)": pct(delays, 0.9),
        "SSE progress events measured (count)": float(len(delays)),
    }


def throughput(server: Server, count: int, args: argparse.Namespace) -> dict[str, Cell]:
    """``count`` demo tasks from 4 connections, then waited for; under the section's bounds."""
    deadline = time.monotonic() + args.phase_timeout
    done: list[int] = []
    errors: list[str] = []

    def part(indexes: range) -> None:
        api = Api(server.port)
        try:
            handles = [submit_demo(api, i, left(deadline)) for i in indexes]
            for handle in handles:
                wait_for(api, handle, left(deadline))
                done.append(1)
        except (JobError, OSError) as exc:
            errors.append(str(exc))
        finally:
            api.close()

    label = f"{count:,} tasks"
    with MemoryWatch(server.proc.pid, args.memory_cap_mib) as memory:
        started = time.perf_counter()
        run_threads(part, [range(i, count, 4) for i in range(4)], args.phase_timeout + 30)
        took = time.perf_counter() - started
    if memory.over_cap:
        raise Stopped(f"—, stopped: memory > {args.memory_cap_mib:,.0f} MiB "
                      f"({len(done)} of {count:,} done)")  # fmt: skip
    if len(done) < count:
        why = (
            f"took > {args.phase_timeout:.0f} s" if not errors or left(deadline) <= 1 else errors[0]
        )
        raise Stopped(f"—, {why} ({len(done)} of {count:,} done, peak {memory.peak:,.0f} MiB)")
    return {
        f"throughput, {label} (tasks/s)": count / took,
        f"peak memory, {label} (MiB PSS, server + tasks)": memory.peak,
    }


def left(deadline: float) -> float:
    return max(1.0, deadline - time.monotonic())


def run_threads(target: Callable[[Any], None], parts: list[Any], timeout: float) -> None:
    threads = [threading.Thread(target=target, args=(part,), daemon=True) for part in parts]
    for thread in threads:
        thread.start()
    end = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))


# the run


def live_latency(system: str, root: Path, args: argparse.Namespace) -> dict[str, Cell]:
    server, _ = launch(system, root, args.phase_timeout)
    try:
        found = latency(server, args.latency_runs, args.phase_timeout)
        return found | sse(server, args.sse_runs, args.phase_timeout)
    finally:
        server.stop()


def live_throughput(count: int) -> Section:
    def section(system: str, root: Path, args: argparse.Namespace) -> dict[str, Cell]:
        server, _ = launch(system, root, args.phase_timeout)
        try:
            return throughput(server, count, args)
        finally:
            server.stop()

    return section


def at_scale(system: str, root: Path, args: argparse.Namespace) -> dict[str, Cell]:
    return scale(system, root, args.scale, args.log_mib, args.phase_timeout)


Section = Callable[[str, Path, argparse.Namespace], dict[str, Cell]]


def sections(args: argparse.Namespace) -> list[tuple[str, Section]]:
    found: list[tuple[str, Section]] = [("latency and SSE", live_latency)]
    found += [(f"throughput, {n:,} tasks", live_throughput(n)) for n in args.counts]
    return [*found, (f"{args.scale:,} tasks", at_scale)]


def run_section(name: str, section: Section, system: str, root: Path,
                args: argparse.Namespace, results: Results) -> None:  # fmt: skip
    started = time.perf_counter()
    try:
        results.add(name, system, section(system, root, args))
    except Stopped as stop:
        results.stop(name, system, str(stop))
    except (JobError, OSError, RuntimeError, KeyError) as exc:
        print(f"    {system} failed: {type(exc).__name__}: {str(exc)[-2000:]}")
        results.stop(name, system, f"—, failed: {type(exc).__name__}: {str(exc)[:120]}")
    print(f"  {name}: {system} in {time.perf_counter() - started:.0f} s", flush=True)


def run(args: argparse.Namespace, systems: list[str], where: Path) -> Results:
    results = Results()
    for round_no in range(args.rounds):
        order = systems if round_no % 2 == 0 else systems[::-1]
        print(f"round {round_no + 1} of {args.rounds}", flush=True)
        for name, section in sections(args):
            for system in order:
                root = where / f"r{round_no}-{name.replace(' ', '-').replace(',', '')}-{system}"
                run_section(name, section, system, root, args, results)
    return results


# the table


def summary(cells: list[Cell]) -> Cell:
    numbers = [c for c in cells if isinstance(c, float | int)]
    if len(numbers) == len(cells) and numbers:
        return float(statistics.median(numbers))
    return next(c for c in cells if isinstance(c, str))


def advantage(row: str, ours: Cell, theirs: Cell) -> str:
    if "(count)" in row:
        return ""
    if not isinstance(ours, float) or not isinstance(theirs, float) or not ours or not theirs:
        return ""
    factor = ours / theirs if "tasks/s" in row else theirs / ours
    return f"{factor:.1f}×" if factor >= 1 else f"{factor:.2f}× (worse)"


def show(row: str, value: Cell) -> str:
    if isinstance(value, str):
        return value
    if "(count)" in row:
        return f"{value:.0f}"
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}" if value < 10 else f"{value:.1f}"


def table(results: Results, systems: list[str], markdown: bool) -> list[str]:
    rows = []
    for row in results.rows():
        values = [results.cell(row, s) for s in systems]
        ratio = [advantage(row, values[0], values[1])] if len(values) == 2 else []
        rows.append([row, *(show(row, v) for v in values), *ratio])
    head = ["", *systems, *(["runyard's advantage"] if len(systems) == 2 else [])]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
        return lines + ["| " + " | ".join(r) + " |" for r in rows]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                      enumerate(zip(r, widths, strict=True))) for r in [head, *rows]]  # fmt: skip


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")), "?")  # fmt: skip
    mem = int(Path("/proc/meminfo").read_text().split()[1]) / (1 << 20)
    load = Path("/proc/loadavg").read_text().split()[:3]
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, load {' '.join(load)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20/100 tasks, 500 at scale")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--counts", type=lambda s: [int(n) for n in s.split(",")],
                        default=[100, 1000])  # fmt: skip
    parser.add_argument("--scale", type=int, default=5000)
    parser.add_argument("--log-mib", type=int, default=256)
    parser.add_argument("--latency-runs", type=int, default=20)
    parser.add_argument("--sse-runs", type=int, default=5)
    parser.add_argument("--phase-timeout", type=float, default=120.0)
    parser.add_argument("--memory-cap-mib", type=float, default=6144.0)
    parser.add_argument("--only", choices=["runyard", "axonx"], default=None)
    parser.add_argument("--markdown", action="store_true", help="the table as Markdown")
    parser.add_argument("--dir", type=Path, default=None, help="where the workspaces go")
    args = parser.parse_args()
    if args.quick:
        args.counts, args.scale, args.log_mib = [20, 100], 500, 16
        args.latency_runs, args.sse_runs, args.phase_timeout = 5, 2, 60.0
    systems = ["runyard", "axonx"]
    if args.only:
        systems = [args.only]
    elif axonx_venv() is None:
        print("no Python 3.12 for AxonX 0.2.2: runyard only")
        systems = ["runyard"]
    print(f"machine: {machine()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="runyard-compare-", dir=args.dir) as tmp:
        results = run(args, systems, Path(tmp))
    print(f"machine after: {machine()}\n")
    print("\n".join(table(results, systems, args.markdown)))


if __name__ == "__main__":
    main()
