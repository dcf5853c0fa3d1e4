"""N concurrent task runs on Kubernetes: what one server costs per run, and how fast it sees.

    .venv/bin/python bench/bench_kube_scale.py [--runs 1000] [--batch 100] [--window 60]
        [--rate 100] [--record-poll 0.5] [--time-limit 900]

What is real: the runyard server (``python -m runyard serve`` in a subprocess on
127.0.0.1, ``task_executor: kubernetes``), its supervisor and KubernetesTasks, the
Kubernetes executor with its watches of Jobs and Pods, the real ``kubernetes`` client,
and HTTP from that client to the fake API server of the tests
(tests/executors/k8s_fake_api.py, in this process, 127.0.0.1). The submits are real HTTP
``POST /jobs/submit`` calls (several threads, at most ``--rate`` per second).

What is played, as a cluster of 10,000 bubblewrap processes does not fit on a small
machine: the kubelet and the worker. A "paper" kubelet marks each pod Running as soon as
the fake creates it (``start_container``) and plays the worker on another node by writing
its records as the worker does, with runyard's own functions (``Workspace.write_status``
of a ``running`` status, a ``state`` line by ``append_event``); a run is ended by writing
its ``succeeded`` status and its event, then ``terminate(job, 0)`` in the fake.

Steps: an idle server is measured first (CPU, VmRSS, PSS, API requests over
``--idle`` seconds); then ``--runs`` tasks are submitted and the time until every pod is
running is taken; at steady state the server's CPU and the API requests are counted over
``--window`` seconds and its memory read, each per run above the idle figures; then
``--batch`` runs end together and one alone, and for each the time from its Job's
completion in the fake to the server's DELETE of that Job is taken (median, p95, max).
Every wait is bounded by ``--time-limit``; the server and the fake are stopped on the
way out. Nothing is asserted: the figures are printed.
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "executors"))
from k8s_fake_api import FakeKubernetes  # noqa: E402

from runyard.runtime.kubetasks import TASK_ID_KEY  # noqa: E402
from runyard.runtime.liveness import state_event  # noqa: E402
from runyard.workspace.events import append_event  # noqa: E402
from runyard.workspace.layout import Workspace  # noqa: E402
from runyard.workspace.records import TaskState, utcnow  # noqa: E402
from serverproc import ServerProcess, start_server  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class TimeUp(Exception):
    pass


@dataclass
class Deadline:
    at: float

    def left(self) -> float:
        return self.at - time.monotonic()

    def wait_for(self, what: Callable[[], str], check: Callable[[], bool],
                 every: float = 0.1) -> None:  # fmt: skip
        while not check():
            if self.left() <= 0:
                raise TimeUp(f"time limit reached waiting for {what()}")
            time.sleep(every)


class PaperCluster(FakeKubernetes):
    """The fake API server with a paper kubelet: each new pod is queued for
    :meth:`run_kubelet`, which starts it and plays its worker's ``running`` records; the
    moment of each Job's first DELETE is noted."""

    def __init__(self) -> None:
        super().__init__()
        self.born: queue.Queue[tuple[str, str]] = queue.Queue()
        self.running: dict[str, str] = {}  # Job name -> task id, once its pod runs
        self.deleted_at: dict[str, float] = {}
        self.workspace: Workspace | None = None

    def _create_pod(self, job: dict[str, Any]) -> None:
        super()._create_pod(job)
        task_id = (job["metadata"].get("annotations") or {}).get(TASK_ID_KEY, "")
        self.born.put((job["metadata"]["name"], task_id))

    def handle(self, method: str, kind: str, ns: str, name: str | None, query: dict[str, str],
               body: Any) -> dict[str, Any]:  # fmt: skip
        if method == "DELETE" and kind == "Job" and name:
            self.deleted_at.setdefault(name, time.monotonic())
        return super().handle(method, kind, ns, name, query, body)

    def run_kubelet(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                job_name, task_id = self.born.get(timeout=0.2)
            except queue.Empty:
                continue
            self.start_container(job_name)
            if task_id and self.workspace is not None:
                play_running(self.workspace, task_id)
            self.running[job_name] = task_id


def play_running(workspace: Workspace, task_id: str) -> None:
    status = workspace.read_status(task_id)
    assert status is not None
    status = status.model_copy(update={"state": TaskState.RUNNING, "started_at": utcnow()})
    append_event(workspace.events_path(task_id), state_event(status.state, status.started_at))
    workspace.write_status(status)


def play_success(workspace: Workspace, task_id: str) -> None:
    status = workspace.read_status(task_id)
    assert status is not None
    status = status.model_copy(update={
        "state": TaskState.SUCCEEDED, "finished_at": utcnow(), "exit_code": 0, "error": "",
        "result": {"result": 2}})  # fmt: skip
    append_event(workspace.events_path(task_id), state_event(status.state, status.finished_at))
    workspace.write_status(status, durable=True)


# --- the server process ------------------------------------------------------------------


@dataclass
class Usage:
    cpu: float  # user + system seconds
    rss_kib: int
    pss_kib: int
    at: float = field(default_factory=time.monotonic)


def usage(pid: int) -> Usage:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return Usage(cpu, _kib(f"/proc/{pid}/status", "VmRSS:"),
                 _kib(f"/proc/{pid}/smaps_rollup", "Pss:"))  # fmt: skip


def _kib(path: str, key: str) -> int:
    for line in Path(path).read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def write_kubeconfig(path: Path, url: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "fake", "user": {}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
    }))  # fmt: skip
    return path


def serve(root: Path, fake: FakeKubernetes, runs: int, record_poll: float) -> ServerProcess:
    k8s = {"image": "registry.example/runyard:1", "python": sys.executable,
           "kubeconfig": str(write_kubeconfig(root / "kubeconfig", fake.url)),
           "node_selector": {"kubernetes.io/hostname": "paper-node"},
           "max_concurrent_tasks": runs, "record_poll_seconds": record_poll}  # fmt: skip
    return start_server(root / "srv", config={"task_executor": "kubernetes", "kubernetes": k8s})


# --- submits -----------------------------------------------------------------------------


class Pacer:
    """Hands out send times at most ``rate`` per second, to any number of threads."""

    def __init__(self, rate: float) -> None:
        self.gap = 1.0 / rate
        self.next = time.monotonic()
        self.lock = threading.Lock()

    def wait(self) -> None:
        with self.lock:
            slot = max(self.next, time.monotonic())
            self.next = slot + self.gap
        time.sleep(max(0.0, slot - time.monotonic()))


def submit_all(server: ServerProcess, runs: int, rate: float, threads: int,
               deadline: Deadline) -> tuple[int, list[str]]:  # fmt: skip
    """Submit ``runs`` demo tasks; returns how many were accepted and the errors."""
    pacer, counter, errors = Pacer(rate), iter(range(runs)), []
    lock = threading.Lock()
    accepted = 0

    def sender() -> None:
        nonlocal accepted
        with server.client(timeout=60) as client:
            while deadline.left() > 0:
                with lock:
                    if next(counter, None) is None:
                        return
                pacer.wait()
                try:
                    reply = client.post("/jobs/submit", json={"arguments": {
                        "task": "demo", "x": 1, "y": 1}})  # fmt: skip
                    ok = reply.status_code == 200 and reply.json()["success"]
                except httpx.HTTPError as exc:
                    ok, why = False, str(exc)
                else:
                    why = reply.text
                with lock:
                    if ok:
                        accepted += 1
                    else:
                        errors.append(why[:200])

    workers = [threading.Thread(target=sender, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(max(0.0, deadline.left()))
    return accepted, errors


# --- the measures ------------------------------------------------------------------------


@dataclass
class Report:
    rows: list[tuple[str, str]] = field(default_factory=list)

    def add(self, name: str, value: str) -> None:
        self.rows.append((name, value))
        print(f"  {name}: {value}", flush=True)

    def print(self) -> None:
        width = max((len(name) for name, _ in self.rows), default=0)
        print()
        for name, value in self.rows:
            print(f"{name:<{width}}  {value}")


def steady(fake: FakeKubernetes, pid: int, seconds: float) -> tuple[Usage, Usage, Counter, float]:
    """The server's usage before and after ``seconds``, the API requests meanwhile and this
    process's CPU (the fake and the paper kubelet) meanwhile."""
    before, counts, mine = usage(pid), fake.request_counts(), own_cpu()
    time.sleep(seconds)
    return before, usage(pid), fake.request_counts() - counts, own_cpu() - mine


def notice_times(fake: PaperCluster, workspace: Workspace, jobs: list[str],
                 deadline: Deadline) -> list[float]:  # fmt: skip
    """End ``jobs`` together (records first, as the worker writes them before it exits);
    the seconds from each Job's completion in the fake to the server's DELETE of it."""
    for job in jobs:
        play_success(workspace, fake.running[job])
    completed = {}
    for job in jobs:
        fake.terminate(job, 0)
        completed[job] = time.monotonic()
    deadline.wait_for(
        lambda: f"the DELETE of the ended Jobs ({len(fake.deleted_at)} of {len(jobs)} seen)",
        lambda: all(job in fake.deleted_at for job in jobs), every=0.01)  # fmt: skip
    return [fake.deleted_at[job] - completed[job] for job in jobs]


def spread(times: list[float]) -> str:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return (f"median {statistics.median(ordered) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
            f"max {ordered[-1] * 1000:.0f} ms (n={len(ordered)})")  # fmt: skip


def machine() -> str:
    total = _kib("/proc/meminfo", "MemTotal:")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{os.cpu_count()} cores, {total / 1048576:.1f} GiB RAM, load average {load}"


def per_run_requests(made: Counter, runs: int, seconds: float) -> str:
    total = sum(made.values())
    detail = ", ".join(f"{verb} {kind}: {n}" for (verb, kind), n in sorted(made.items()))
    return f"{total / runs / (seconds / 60):.4f} ({total} in {seconds:g} s: {detail or 'none'})"


@contextmanager
def cluster_and_server(args: argparse.Namespace, folder: Path) -> Iterator[
        tuple[PaperCluster, ServerProcess, threading.Event]]:  # fmt: skip
    fake = PaperCluster().start()
    stop = threading.Event()
    kubelet = threading.Thread(target=fake.run_kubelet, args=(stop,), daemon=True)
    server: ServerProcess | None = None
    try:
        server = serve(folder, fake, args.runs, args.record_poll)
        fake.workspace = Workspace.open(server.workspace, server.log_dir)
        kubelet.start()
        yield fake, server, stop
    finally:
        stop.set()
        if server is not None:
            server.stop(timeout=60)
        fake.stop()


def measure(args: argparse.Namespace, report: Report, folder: Path) -> None:
    deadline = Deadline(time.monotonic() + args.time_limit)
    with cluster_and_server(args, folder) as (fake, server, _):
        pid = server.proc.pid
        time.sleep(2.0)  # the start-up's tail (the sweeper's first round, the watches)
        idle_before, idle, idle_made, _ = steady(fake, pid, args.idle)
        idle_cpu = (idle.cpu - idle_before.cpu) / args.idle
        report.add("idle server", f"CPU {idle_cpu * 100:.2f} % of a core, "
                   f"VmRSS {idle.rss_kib / 1024:.1f} MiB, PSS {idle.pss_kib / 1024:.1f} MiB, "
                   f"{sum(idle_made.values())} API requests in {args.idle:g} s")  # fmt: skip

        started, requests_before, mine = time.monotonic(), fake.request_counts(), own_cpu()
        accepted, errors = submit_all(server, args.runs, args.rate, args.threads, deadline)
        submitted = time.monotonic() - started
        report.add("submits", f"{accepted} accepted in {submitted:.1f} s "
                   f"({accepted / submitted:.1f}/s), {len(errors)} refused"
                   + (f", first: {errors[0]}" if errors else ""))  # fmt: skip
        deadline.wait_for(lambda: f"{accepted} pods running ({len(fake.running)} are)",
                          lambda: len(fake.running) >= accepted)  # fmt: skip
        launched = time.monotonic() - started
        at_launch = usage(pid)
        launch_made = fake.request_counts() - requests_before
        report.add(f"launch of {accepted}", f"all pods running {launched:.1f} s after the "
                   f"first submit ({accepted / launched:.1f} runs/s); server CPU "
                   f"{at_launch.cpu - idle.cpu:.1f} s ({(at_launch.cpu - idle.cpu) / accepted * 1000:.1f}"
                   f" ms per run, {(at_launch.cpu - idle.cpu) / launched * 100:.0f} % of a core); {sum(launch_made.values()) / accepted:.1f} API requests per "
                   f"run; this process (fake + paper kubelet + submits) "
                   f"{own_cpu() - mine:.1f} s CPU")  # fmt: skip

        report.add("launch: API requests", ", ".join(
            f"{verb} {kind}: {n}" for (verb, kind), n in sorted(launch_made.items())))
        time.sleep(min(args.settle, max(0.0, deadline.left() - args.window)))
        before, after, made, fake_cpu = steady(fake, pid, args.window)
        cpu = (after.cpu - before.cpu) / args.window
        report.add("load average at steady state", ", ".join(f"{x:.2f}" for x in os.getloadavg()))
        report.add(f"steady, {accepted} running: server CPU",
                   f"{cpu * 100:.1f} % of a core, {(cpu - idle_cpu) / accepted * 1e6:.1f} us/s "
                   f"per run above idle")  # fmt: skip
        report.add("steady: fake API + paper kubelet CPU (this process)",
                   f"{fake_cpu / args.window * 100:.1f} % of a core")
        report.add(f"steady: server memory, {accepted} running",
                   f"VmRSS {after.rss_kib / 1024:.1f} MiB "
                   f"({(after.rss_kib - idle.rss_kib) / accepted:.1f} KiB per run above idle), "
                   f"PSS {after.pss_kib / 1024:.1f} MiB "
                   f"({(after.pss_kib - idle.pss_kib) / accepted:.1f} KiB per run)")  # fmt: skip
        report.add("steady: API requests per run per minute",
                   per_run_requests(made, accepted, args.window))

        workspace = fake.workspace
        assert workspace is not None
        jobs = sorted(fake.running)
        batch, alone = jobs[: args.batch], jobs[args.batch]
        report.add(f"notice of {len(batch)} ended together",
                   spread(notice_times(fake, workspace, batch, deadline)))
        time.sleep(2.0)
        report.add("notice of one ended alone",
                   spread(notice_times(fake, workspace, [alone], deadline)))
        alive = "running" if server.proc.poll() is None else f"exited {server.proc.returncode}"
        report.add("server at the end", f"{alive}, VmRSS {usage(pid).rss_kib / 1024:.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=100, help="runs ended together")
    parser.add_argument("--window", type=float, default=60.0, help="steady window, seconds")
    parser.add_argument("--idle", type=float, default=10.0, help="idle window, seconds")
    parser.add_argument("--settle", type=float, default=10.0,
                        help="seconds after the last pod runs before the steady window")
    parser.add_argument("--rate", type=float, default=100.0, help="submits per second, at most")
    parser.add_argument("--threads", type=int, default=8, help="submitting threads")
    parser.add_argument("--record-poll", type=float, default=0.5,
                        help="kubernetes.record_poll_seconds of the server")
    parser.add_argument("--time-limit", type=float, default=900.0, help="seconds, in all")
    args = parser.parse_args()
    if args.runs <= args.batch:
        parser.error("--runs must be more than --batch (one more run ends alone)")
    print(f"{args.runs} task runs on the fake Kubernetes API; {machine()}", flush=True)
    report = Report()
    with tempfile.TemporaryDirectory(prefix="bench-kube-scale-") as folder:
        try:
            measure(args, report, Path(folder))
        except TimeUp as exc:
            report.add("stopped", str(exc))
    report.add("machine at the end", machine())
    report.print()


if __name__ == "__main__":
    main()
