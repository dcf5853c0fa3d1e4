"""This machine's per-task floor, the same tasks through runyard over HTTP, and the ratio.

    .venv/bin/python bench/floor.py [--tasks 500] [--repeats 3] [--concurrency 8] [--profile]

The floor is the least a durable, isolated task can cost here. A warm process (this one)
creates each task as runyard's submit does — a folder, a ``queued`` line in
``events.jsonl``, ``status.json`` written atomically with fsync, the folders fsynced — then
forks a child for it, at most ``--concurrency`` alive at once (runyard's
``max_concurrent_tasks``), and reaps them. Each child takes the steps a runyard worker
must: ``running`` (an events line and a status rewrite, not fsynced, as runyard's), then
``metadata.json`` and the ``succeeded`` status, each atomic with fsync and its folder
fsynced, a last events line, exit. Three fsynced records a task, as in runyard.

Where this process may create cgroups (as root, say), the floor runs once more with what a
runyard server adds there to isolate each task: a tracking cgroup of its own
(:mod:`runyard.executors.cgroups`), made before the fork, joined by the child before it
runs anything (runyard's standbys join theirs before their run is known), removed after
the reap. Its ratio is printed beside the target's, to tell what containment costs this
machine from what runyard's own code costs; the target is the plain floor's.

Then the same count of ``demo`` tasks goes through a real runyard server on 127.0.0.1
(``runyard.client.Client`` from ``--clients`` threads: submit all, then wait for each), in
the same run, floor and server alternating. Prints tasks/s and ms a task (median of the
repeats), the ratio (DESIGN section 8 asks for at least 50 %), and the CPU a task costs in
each process: the floor's parent and children; runyard's server, its launcher (the
pre-forked zygote) and the workers the launcher reaps, and the client; then the page faults
a task costs the forking side and its children. Last, what one new file costs in the run's
folder at its start and its end (:func:`create_cost`): where that is far above a few tens
of µs, the filesystem, not the code, sets both figures.

``--profile`` samples one more HTTP round (not in the figures) with py-spy (``pip install
py-spy``; found on PATH, next to this Python or at ``--py-spy``) over the server and its
subprocesses, and prints the share of each process, the top functions by own samples, the
runyard functions the samples fall under, and the CPU each of the server's threads spent
(from ``/proc``, by thread name, a task's share). Every wait is bounded; nothing is asserted
on time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from floor_profile import (  # noqa: E402
    Sampler,
    find_py_spy,
    print_profile,
    print_threads,
    thread_cpu,
    thread_names,
)

from runyard.client import Client  # noqa: E402
from runyard.errors import ClientError  # noqa: E402
from runyard.executors.base import Limits  # noqa: E402
from runyard.executors.cgroups import Cgroup, CgroupHost, detect_host  # noqa: E402
from runyard.executors.containment import join_self  # noqa: E402
from serverproc import ServerProcess, start_server  # noqa: E402

DEADLINE_SECONDS = 600.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# the floor


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, record: dict[str, Any], *, fsync: bool) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, json.dumps(record, separators=(",", ":")).encode())
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def append_line(path: Path, event: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, json.dumps(event, separators=(",", ":")).encode() + b"\n")
    finally:
        os.close(fd)


def stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{time.time_ns() % 10**9:09d}Z"


def create_task(base: Path, index: int) -> tuple[Path, dict[str, Any]]:
    """What a submit writes: the folder, its first events line, a durable queued status."""
    task_id = f"base#demo#floor-{index}"
    status: dict[str, Any] = {
        "task_id": task_id, "run_id": os.urandom(16).hex(), "task_type": "base",
        "task_name": "demo", "state": "queued", "config": {"x": index, "y": 1},
        "created_at": stamp(), "started_at": None, "finished_at": None, "pid": None,
        "exit_code": None, "error": "", "result": {}, "steps": [],
    }  # fmt: skip
    folder = base / task_id
    folder.mkdir()
    append_line(folder / "events.jsonl", {"kind": "state", "state": "queued"})
    write_atomic(folder / "status.json", status, fsync=True)
    fsync_dir(folder)
    fsync_dir(base)
    return folder, status


def run_task(folder: Path, status: dict[str, Any]) -> None:
    """What a worker writes: running, then metadata and the final status, durably."""
    status.update(state="running", started_at=stamp(), pid=os.getpid())
    append_line(folder / "events.jsonl", {"kind": "state", "state": "running"})
    write_atomic(folder / "status.json", status, fsync=False)
    metadata = {"task_id": status["task_id"], "reg_name": "demo", "input_params": status["config"],
                "output_params": {"result": status["config"]["x"] + 1}}  # fmt: skip
    write_atomic(folder / "metadata.json", metadata, fsync=True)
    fsync_dir(folder)
    status.update(state="succeeded", finished_at=stamp(), exit_code=0,
                  result=metadata["output_params"])  # fmt: skip
    append_line(folder / "events.jsonl", {"kind": "state", "state": "succeeded"})
    write_atomic(folder / "status.json", status, fsync=True)
    fsync_dir(folder)


def forked(folder: Path, status: dict[str, Any], procs: list[str]) -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            join_self(procs, [])  # its tracking cgroup, before anything of the task
            run_task(folder, status)
            code = 0
        finally:
            os._exit(code)
    return pid


def reap_one() -> int:
    pid, wait_status = os.wait()
    if os.waitstatus_to_exitcode(wait_status) != 0:
        raise SystemExit("a floor task failed")
    return pid


def floor_round(base: Path, count: int, concurrency: int, host: CgroupHost | None = None) -> float:
    """Seconds for ``count`` tasks: created here, each run in a forked child (in a tracking
    cgroup of its own made under ``host``, when given)."""
    base.mkdir(parents=True)
    alive: dict[int, Cgroup | None] = {}
    started = time.perf_counter()
    try:
        for index in range(count):
            if len(alive) >= concurrency:
                _end(alive.pop(reap_one()))
            group = None if host is None else host.create(f"{base.name}-{index}", Limits())
            procs = [] if group is None else [str(path) for path in group.procs_files]
            alive[forked(*create_task(base, index), procs)] = group
        while alive:
            _end(alive.pop(reap_one()))
    finally:
        for group in alive.values():  # a failed round's: each goes once it is empty
            if group is not None:
                group.remove()
    return time.perf_counter() - started


def _end(group: Cgroup | None) -> None:
    if group is not None and not group.remove():
        raise SystemExit(f"the floor's cgroup {group.name} did not empty")


def create_cost(folder: Path, count: int = 200) -> float:
    """CPU microseconds one new file costs in a new folder under ``folder`` now.

    Every task creates files (the floor 6; runyard 9, also its worker's lock, its log and
    the log's folder), and on some filesystems a create is not a constant: ext4 without a
    journal passes over each inode freed in the last 60-360 s of the folder's block group
    on every create, so a group that saw many deletions (a temp folder after test runs, or
    the status files a run replaces) makes creates ten or twenty times dearer. A kernel that caches millions of inodes and dentries (left by folders of
    past runs, deleted or not) makes each create walk long hash chains: 240 µs a file here
    with 6 million inodes and 7.4 million dentries cached, 34 µs once they were dropped.
    Printed at both ends of the run, with :func:`kernel_caches`, to tell such a machine
    state apart.
    """
    probe = folder / f"create-probe-{time.monotonic_ns()}"
    probe.mkdir(parents=True)
    started = time.process_time()
    for index in range(count):
        os.close(os.open(probe / f"f{index}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    return (time.process_time() - started) * 1e6 / count


def kernel_caches() -> str:
    """How many inodes and dentries the kernel caches now (``/proc/sys/fs``), or ``""``."""
    try:
        inodes = int(Path("/proc/sys/fs/inode-state").read_text().split()[0])
        dentries = int(Path("/proc/sys/fs/dentry-state").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return ""
    return f"; the kernel caches {inodes:,} inodes and {dentries:,} dentries"


# runyard over HTTP


def http_round(srv: ServerProcess, count: int, prefix: str, clients: int) -> float:
    """Seconds from the first submit until every one of ``count`` demo tasks was waited for."""
    failures: list[str] = []

    def client_part(indexes: range) -> None:
        with Client(srv.url, srv.token, timeout=DEADLINE_SECONDS) as client:
            try:
                handles = [client.submit("demo", name=f"{prefix}-{i}", x=i, y=1) for i in indexes]
                for handle in handles:
                    status = client.wait(handle, timeout=DEADLINE_SECONDS)
                    if status.state != "succeeded":
                        failures.append(f"{handle.task_id}: {status.state} {status.error}")
            except ClientError as exc:
                failures.append(f"{type(exc).__name__}: {exc}")

    started = time.perf_counter()
    in_threads(client_part, [range(i, count, clients) for i in range(clients)])
    took = time.perf_counter() - started
    if failures:
        raise SystemExit("demo tasks did not succeed: " + "; ".join(failures[:5]))
    return took


def in_threads(target: Callable[[Any], None], parts: list[Any]) -> None:
    workers = [threading.Thread(target=target, args=(part,), daemon=True) for part in parts]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(DEADLINE_SECONDS)
        if worker.is_alive():
            raise SystemExit(f"a client thread took more than {DEADLINE_SECONDS:.0f} s")


# CPU accounting


def proc_cpu(pid: int) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds of ``pid``, from /proc/<pid>/stat."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    own = int(fields[11]) + int(fields[12])
    children = int(fields[13]) + int(fields[14])
    return own / CLOCK_TICKS, children / CLOCK_TICKS


def proc_faults(pid: int) -> tuple[int, int]:
    """(own, reaped children's) minor page faults of ``pid``, from /proc/<pid>/stat."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[7]), int(fields[8])


def launcher_pid(server_pid: int) -> int | None:
    """The zygote the server started (the process that forks and reaps the workers)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        if parent == server_pid and b"runyard.executors.zygote" in cmdline:
            return int(entry.name)
    return None


@dataclass
class CpuSnapshot:
    values: dict[str, float]

    @classmethod
    def of_runyard(cls, server_pid: int, zygote: int | None) -> CpuSnapshot:
        server, _ = proc_cpu(server_pid)
        launcher, workers = proc_cpu(zygote) if zygote else (0.0, 0.0)
        client = os.times()
        return cls({"server": server, "launcher": launcher, "workers": workers,
                    "client (this process)": client.user + client.system})  # fmt: skip

    @classmethod
    def of_floor(cls) -> CpuSnapshot:
        times = os.times()
        return cls(
            {
                "parent (creates, forks, reaps)": times.user + times.system,
                "children (run the task)": times.children_user + times.children_system,
            }
        )

    def per_task_ms(self, before: CpuSnapshot, count: int) -> dict[str, float]:
        return {k: (v - before.values[k]) * 1000 / count for k, v in self.values.items()}


@dataclass
class Faults:
    """Minor page faults (copy-on-write ones among them) of the forking side and of the
    children it reaped: where a forked task's memory cost shows."""

    values: dict[str, int]

    @classmethod
    def of_runyard(cls, zygote: int | None) -> Faults:
        launcher, workers = proc_faults(zygote) if zygote else (0, 0)
        return cls({"launcher": launcher, "workers": workers})

    @classmethod
    def of_floor(cls) -> Faults:
        own = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
        return cls({"parent": own, "children": children})

    def per_task(self, before: Faults, count: int) -> dict[str, float]:
        return {k: (v - before.values[k]) / count for k, v in self.values.items()}


# the run


@dataclass
class Figures:
    floor: list[float]
    http: list[float]
    contained: list[float]  # the floor with a tracking cgroup a task (none: no cgroups here)
    floor_cpu: dict[str, float]
    http_cpu: dict[str, float]
    create_us: list[float]
    faults: dict[str, dict[str, float]]


def measure(root: Path, srv: ServerProcess, args: argparse.Namespace) -> Figures:
    zygote = launcher_pid(srv.proc.pid)
    figures = Figures([], [], [], {}, {}, [create_cost(root)], {})
    host = detect_host()
    http_round(srv, min(args.tasks, 20), "warm", args.clients)  # the zygote and page cache
    for repeat in range(args.repeats):
        # the contained round first in even repeats, last in odd ones: neither floor always
        # follows the same round
        if host is not None and repeat % 2 == 0:
            figures.contained.append(contained_round(root, repeat, args, host))
        before, faults = CpuSnapshot.of_floor(), Faults.of_floor()
        figures.floor.append(floor_round(root / f"floor-{repeat}", args.tasks, args.concurrency))
        figures.floor_cpu = CpuSnapshot.of_floor().per_task_ms(before, args.tasks)
        figures.faults["floor"] = Faults.of_floor().per_task(faults, args.tasks)
        before, faults = CpuSnapshot.of_runyard(srv.proc.pid, zygote), Faults.of_runyard(zygote)
        figures.http.append(http_round(srv, args.tasks, f"r{repeat}", args.clients))
        figures.http_cpu = CpuSnapshot.of_runyard(srv.proc.pid, zygote).per_task_ms(
            before, args.tasks
        )
        figures.faults["runyard"] = Faults.of_runyard(zygote).per_task(faults, args.tasks)
        if host is not None and repeat % 2 == 1:
            figures.contained.append(contained_round(root, repeat, args, host))
    figures.create_us.append(create_cost(root))
    return figures


def contained_round(root: Path, repeat: int, args: argparse.Namespace, host: CgroupHost) -> float:
    """The floor with a tracking cgroup a task; its cgroups' names are this run's own (they
    are machine-wide)."""
    name = f"runyard-floor-{os.getpid()}-{repeat}"
    return floor_round(root / name, args.tasks, args.concurrency, host)


def report(figures: Figures, args: argparse.Namespace) -> None:
    count = args.tasks
    floor_s, http_s = statistics.median(figures.floor), statistics.median(figures.http)
    print(f"\n{count} tasks, concurrency {args.concurrency}, median of {args.repeats} repeats")
    print(f"  {'':32} {'tasks/s':>9} {'ms/task':>9}   each repeat (s)")
    rows = [("floor (fork, 3 fsynced records)", figures.floor),
            ("floor + a tracking cgroup each", figures.contained),
            ("runyard over HTTP (demo)", figures.http)]  # fmt: skip
    for label, runs in rows:
        if runs:
            took, each = statistics.median(runs), " ".join(f"{r:.2f}" for r in runs)
            print(f"  {label:32} {count / took:9.1f} {took * 1000 / count:9.2f}   {each}")
    print(f"  ratio runyard / floor: {floor_s / http_s * 100:.1f} % (target >= 50 %)")
    if figures.contained:
        contained_s = statistics.median(figures.contained)
        print(
            f"  ratio runyard / floor with its cgroups: {contained_s / http_s * 100:.1f} %"
            f" (the cgroups alone cost the floor {(1 - floor_s / contained_s) * 100:.0f} %"
            " of its throughput)"
        )
    else:
        print("  (no cgroups can be made here: runyard's launches run without them too)")
    print("  CPU ms a task (last repeat):")
    for label, cpu in (("floor", figures.floor_cpu), ("runyard", figures.http_cpu)):
        parts = ", ".join(f"{name} {ms:.2f}" for name, ms in cpu.items())
        print(f"    {label:8} {sum(cpu.values()):6.2f} = {parts}")
    print("  page faults a task (last repeat):")
    for label, faults in figures.faults.items():
        parts = ", ".join(f"{name} {count:.0f}" for name, count in faults.items())
        print(f"    {label:8} {parts}")
    first, last = figures.create_us
    print(
        f"  a new file in this folder: {first:.0f} µs of CPU at the start, {last:.0f} at the"
        f" end (see create_cost){kernel_caches()}"
    )


def profile(srv: ServerProcess, args: argparse.Namespace, where: Path) -> None:
    py_spy = find_py_spy(args.py_spy)
    if py_spy is None:
        print("\nprofile: py-spy not found (pip install py-spy, or --py-spy PATH)")
        return
    zygote = launcher_pid(srv.proc.pid)
    with Sampler(py_spy, srv.proc.pid, where / "profile.txt") as sampler:
        before = thread_cpu(srv.proc.pid)
        http_round(srv, args.tasks, "profiled", args.clients)
        after = thread_cpu(srv.proc.pid)
    roles = {srv.proc.pid: "server"} | ({zygote: "launcher"} if zygote else {})
    print_profile(sampler.output, roles, top=args.top)
    print_threads(before, after, thread_names(py_spy, srv.proc.pid), args.tasks)


def out_of_time(signum: int, frame: object) -> None:
    raise SystemExit("out of time (--time-limit)")  # the server is stopped on the way out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8, help="max_concurrent_tasks")
    parser.add_argument("--clients", type=int, default=4, help="HTTP client threads")
    parser.add_argument("--profile", action="store_true", help="sample one more HTTP round")
    parser.add_argument("--py-spy", default=None, help="the py-spy program")
    parser.add_argument("--top", type=int, default=15, help="profile lines to print")
    parser.add_argument("--dir", type=Path, default=None, help="where the workspaces go")
    parser.add_argument("--time-limit", type=int, default=900, help="seconds for the whole run")
    args = parser.parse_args()
    signal.signal(signal.SIGALRM, out_of_time)
    signal.alarm(args.time_limit)
    with tempfile.TemporaryDirectory(prefix="runyard-floor-", dir=args.dir) as tmp:
        root = Path(tmp)
        srv = start_server(root / "server", config={"max_concurrent_tasks": args.concurrency})
        try:
            report(measure(root, srv, args), args)
            if args.profile:
                profile(srv, args, root)
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
