"""A real server at scale: time to listen, time to index ready, memory, reads, delete one.

    .venv/bin/python bench/bench_scale.py [--tasks 100000] [--workspace DIR] [--reuse-snapshot]

Generates the task folders of bench_repository (kept in ``--workspace`` to be reused),
starts ``runyard serve`` on them once without an index snapshot (timed until ready, then
stopped: it leaves its snapshot; ``--reuse-snapshot`` skips this start when the workspace
has one), then again with it, and prints, each against its target and whether it is met:
the ready time of both starts, then of the second: the time until the port accepts and
until ``/health`` first answers (and what it says meanwhile), until the scan is done and
until ``/health`` shows no ``indexing``, the server's memory once ready (the 1 GiB target
is for 1,000,000 tasks; smaller runs show the growth per task and what it comes to at a
million, above an empty workspace's server). Once the server is quiet after ready (its
snapshot written, its MCP server built): the first page, ``status`` and
``get_task_graph`` (median of many, client side and as the server's access log times
them; ``status`` first as each of 200 tasks is read for the first time since the server
started, then as the same tasks are read again, as a client polling them does, also with a
lean http.client keep-alive client, and both clients' own time against a server that
answers a constant), the unpaged
``list_task_statuses {}`` and ``list_task_ids {}`` (best of three, with the server's CPU
and memory), the throughput of demo tasks submitted and waited for through the Job API
against the same on an empty workspace (the tasks are deleted after), and
``delete_tasks`` of one task whose log lies in the log folder. The
server's CPU seconds and the load average are printed next to the times: on a busy
machine the wall times say more about the neighbours than about the server.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from bench_repository import TYPES, generate  # noqa: E402

from runyard.client import Client  # noqa: E402

DELETES = 7
SUBMITS = 300  # demo tasks a submit round runs, from SUBMIT_CLIENTS threads
SUBMIT_CLIENTS = 4
SUBMIT_ROUNDS = 2


def memory(pid: int) -> dict[str, float]:
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) / 1024
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prepare(root: Path, count: int) -> list[str]:
    """The workspace (generated once), and tasks to delete whose logs are in the log folder."""
    ws, logs = root / "ws", root / "logs"
    marker = root / f"generated-{count}"
    if not marker.exists():
        start = time.perf_counter()
        generate(ws, count)
        marker.touch()
        print(f"generated {count:,} task folders in {time.perf_counter() - start:.1f} s")
    victims = []
    for n in range(DELETES):
        task_id = f"base#demo#victim{n}"
        folder = ws / "base" / task_id
        log = logs / "base" / task_id / "run.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("log\n")
        folder.mkdir(parents=True, exist_ok=True)
        status = {
            "task_id": task_id, "run_id": f"{n:032x}", "task_type": "base",
            "task_name": "demo", "state": "succeeded", "config": {"task_name": f"victim{n}"},
            "created_at": "2026-01-01T00:00:00Z", "started_at": None, "finished_at": None,
            "pid": None, "exit_code": 0, "error": "", "result": {}, "steps": [],
            "log_path": str(log),
        }  # fmt: skip
        (folder / "status.json").write_text(json.dumps(status))
        victims.append(task_id)
    return victims


def wait_port(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.005)
    raise RuntimeError("the port never opened")


def first_health(client: httpx.Client, start: float) -> float:
    """Seconds from the start until ``/health`` answered 200 for the first time."""
    while time.monotonic() < start + 900:
        try:
            if client.get("/health").status_code == 200:
                return time.monotonic() - start
        except httpx.TransportError:
            pass
        time.sleep(0.005)
    raise RuntimeError("/health never answered")


def wait_ready(client: httpx.Client, start: float) -> tuple[float | None, float, list[str]]:
    """Seconds until the scan was done (``done == total``) and until ready, and what
    ``/health`` said that did not hold (``running: true`` and ``{done, total}``)."""
    scanned, problems = None, []
    while time.monotonic() < start + 900:
        try:
            answer = client.get("/health").json()["answer"]
        except httpx.TransportError as exc:  # a kept-alive connection closed as it was reused
            problems.append(f"/health while indexing: {exc!r}")
            continue
        indexing = answer.get("indexing")
        if indexing is None:
            return scanned, time.monotonic() - start, problems
        if answer.get("running") is not True or set(indexing) != {"done", "total"}:
            problems.append(f"/health while indexing: {answer}")
        elif scanned is None and indexing["done"] == indexing["total"] > 0:
            scanned = time.monotonic() - start
        time.sleep(0.02)
    raise RuntimeError("the index never became ready")


def timed_post(client: httpx.Client, job: str, arguments: dict) -> tuple[float, int, object]:
    start = time.perf_counter()
    reply = client.post(f"/jobs/{job}", json={"arguments": arguments})
    took = time.perf_counter() - start
    reply.raise_for_status()
    return took, len(reply.content), reply.json()


def median_ms(client: httpx.Client, job: str, arguments: list[dict]) -> float:
    return statistics.median(timed_post(client, job, args)[0] * 1000 for args in arguments)


def lean_median_ms(client: httpx.Client, job: str, arguments: list[dict]) -> float:
    """As :func:`median_ms`, with http.client on one keep-alive connection: a client that
    adds less of its own time than httpx does."""
    conn = http.client.HTTPConnection(client.base_url.host, client.base_url.port, timeout=300)
    took = []
    try:
        for args in arguments:
            body = json.dumps({"arguments": args})
            start = time.perf_counter()
            conn.request("POST", f"/jobs/{job}", body, {"content-type": "application/json"})
            reply = conn.getresponse()
            reply.read()
            took.append((time.perf_counter() - start) * 1000)
            if reply.status != 200:
                raise RuntimeError(f"{job}: HTTP {reply.status}")
    finally:
        conn.close()
    return statistics.median(took)


# A server that answers every request with the same status-sized JSON at once, in a
# process of its own: what a client's own time per call is (see ``client_floor_ms``).
CONSTANT_SERVER = r"""
import asyncio, sys
body = b'{"answer":{"task_id":"' + b"x" * 860 + b'"},"success":true,"metadata":{}}'
reply = (b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\ncontent-type: application/json\r\n\r\n"
         % len(body) + body)
class Answer(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.pending = transport, b""
    def data_received(self, data):
        self.pending += data
        while b"\r\n\r\n" in self.pending:
            head, _, rest = self.pending.partition(b"\r\n\r\n")
            size = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    size = int(line.split(b":")[1])
            if len(rest) < size:
                return
            self.pending = rest[size:]
            self.transport.write(reply)
async def main():
    server = await asyncio.get_running_loop().create_server(Answer, "127.0.0.1", int(sys.argv[1]))
    await asyncio.sleep(120)  # stops by itself
asyncio.run(main())
"""


def client_floor_ms(calls: list[dict]) -> tuple[float, float]:
    """Medians of httpx and of the lean client against ``CONSTANT_SERVER``: the part of a
    call's time that is the client's and the loopback's, not the server's."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", CONSTANT_SERVER, str(port)])
    try:
        wait_port(port, time.monotonic() + 30)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            return median_ms(client, "status", calls), lean_median_ms(client, "status", calls)
    finally:
        server.kill()
        server.wait()


def cpu_seconds(pid: int) -> float:
    """User and system time of the server and of its finished children (the scan helper)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def helper_cpu_seconds(pid: int) -> float:
    """User and system time of the server's finished children (the scan helper)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[13:15]) / os.sysconf("SC_CLK_TCK")


def verdict(label: str, value: float, unit: str, target: float | None) -> None:
    shown = f"{value:10.3f} {unit:<3}"
    if target is None:
        print(f"  {label:<36}{shown}")
        return
    met = "met" if value <= target else "NOT met"
    print(f"  {label:<36}{shown} target <= {target:g} {unit} ({value / target:.2f}x): {met}")


def serve(root: Path, workspace: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    argv = [
        sys.executable, "-m", "runyard", "serve", "--host", "127.0.0.1", "--port", str(port),
        "--workspace-dir", str(workspace), "--log-dir", str(root / "logs"), "--no-auth",
    ]  # fmt: skip
    errors = (root / "server.err").open("w")  # why a server that never listened died
    proc = subprocess.Popen(argv, cwd=root, stdout=subprocess.DEVNULL, stderr=errors)
    errors.close()
    return proc, port


def empty_server(root: Path) -> tuple[float, float]:
    """A ready server on an empty workspace: its VmRSS (what is not the index), and its
    submit throughput (tasks/s) to hold the one at scale against."""
    proc, port = serve(root, root / "empty-ws")
    try:
        wait_port(port, time.monotonic() + 120)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            wait_ready(client, time.monotonic())
            mib = memory(proc.pid)["VmRSS"]
            settled(proc)
            print("\nan empty workspace:")
            rate = submits(proc, client, "on an empty workspace")
            return mib, rate
    finally:
        proc.terminate()
        proc.wait(30)


def submit_round(url: str, prefix: str) -> tuple[float, list[str]]:
    """Seconds for SUBMITS demo tasks (each client thread submits its share, then waits for
    each), and their ids."""
    made: list[str] = []
    failures: list[str] = []

    def part(indexes: range) -> None:
        with Client(url, None, timeout=300) as client:
            handles = [client.submit("demo", name=f"{prefix}-{i}", x=i, y=1) for i in indexes]
            for handle in handles:
                status = client.wait(handle, timeout=300)
                if status.state != "succeeded":
                    failures.append(f"{handle.task_id}: {status.state} {status.error}")
            made.extend(handle.task_id for handle in handles)

    threads = [threading.Thread(target=part, args=(range(i, SUBMITS, SUBMIT_CLIENTS),))
               for i in range(SUBMIT_CLIENTS)]  # fmt: skip
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    took = time.monotonic() - start
    if failures or len(made) != SUBMITS:
        raise SystemExit(f"submit round {prefix}: {len(made)} made; {failures[:3]}")
    return took, made


def submits(proc: subprocess.Popen[bytes], client: httpx.Client, where: str) -> float:
    """Median tasks/s of SUBMIT_ROUNDS rounds of demo tasks through the Job API (the new
    tasks are deleted after, so a kept workspace keeps its count); prints it."""
    url = str(client.base_url).rstrip("/")
    rates, cpu_ms = [], []
    for index in range(SUBMIT_ROUNDS):
        before = cpu_seconds(proc.pid)
        took, made = submit_round(url, f"scale-submit-{index}")
        rates.append(SUBMITS / took)
        cpu_ms.append((cpu_seconds(proc.pid) - before) * 1000 / SUBMITS)
        answer = client.post("/jobs/delete_tasks", json={"arguments": {"task_ids": made}})
        if answer.status_code != 200 or not answer.json().get("success"):
            raise SystemExit(f"could not delete the submitted tasks: {answer.text[:300]}")
    rate = statistics.median(rates)
    each = " ".join(f"{r:.1f}" for r in rates)
    print(f"  submit and wait, {SUBMITS} demo tasks from {SUBMIT_CLIENTS} clients {where}:"
          f" {rate:.1f} tasks/s (rounds {each}); server CPU {statistics.median(cpu_ms):.1f}"
          " ms a task")  # fmt: skip
    return rate


def startup(
    proc: subprocess.Popen[bytes], client: httpx.Client, count: int, start: float, how: str
) -> None:
    scanned, ready, problems = wait_ready(client, start)
    helper, peak = helper_cpu_seconds(proc.pid), memory(proc.pid)["VmHWM"]
    print(f"  (server CPU until ready {cpu_seconds(proc.pid):.1f} s, the scan helper's"
          f" {helper:.1f} s of it; peak memory {peak:.0f} MiB; load average"
          f" {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")  # fmt: skip
    for problem in problems[:3]:
        print(f"  NOT as specified: {problem}")
    if scanned is not None:
        verdict("scan done (/health done == total)", scanned, "s", None)
    verdict(f"time to index ready, {how}", ready, "s", 3.0 * max(1.0, count / 100_000))


def settled(proc: subprocess.Popen[bytes], limit: float = 120.0) -> float:
    """Seconds until the server is quiet (under a fifth of a core for a second: the index
    snapshot written after the start, the MCP server built), at most ``limit``: the reads
    are timed in the steady state, not against the server's own work after ready."""
    start = time.monotonic()
    used = cpu_seconds(proc.pid)
    while time.monotonic() - start < limit:
        time.sleep(1.0)
        now = cpu_seconds(proc.pid)
        if now - used < 0.2:
            break
        used = now
    return time.monotonic() - start


def first_start(root: Path, count: int) -> None:
    """A start without an index snapshot (the one it leaves is written at its stop)."""
    snapshot = root / "ws" / ".index" / "snapshot"
    snapshot.unlink(missing_ok=True)
    os.sync()
    start = time.monotonic()
    proc, port = serve(root, root / "ws")
    try:
        wait_port(port, start + 900)
        print(f"\n{count:,} tasks, first start (no index snapshot): server pid {proc.pid}")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
            startup(proc, client, count, start, "no snapshot")
    finally:
        stopping = time.monotonic()
        proc.terminate()
        proc.wait(300)
    written = snapshot.stat().st_size if snapshot.exists() else 0
    print(f"  stopped in {time.monotonic() - stopping:.1f} s; snapshot {written / 1e6:.1f} MB")


def memory_targets(proc: subprocess.Popen[bytes], count: int, empty_mib: float) -> None:
    rss = memory(proc.pid)["VmRSS"]
    per_task = (rss - empty_mib) * 2**20 / count
    verdict("server VmRSS once ready", rss, "MiB", 1024.0 if count >= 1_000_000 else None)
    print(f"    {per_task:,.0f} bytes per task above an empty workspace's {empty_mib:.0f} MiB")
    if count < 1_000_000:
        projected = empty_mib + per_task * 1_000_000 / 2**20
        verdict("  so at 1,000,000 tasks about", projected, "MiB", 1024.0)


def served_ms(log: Path, since: int, job: str, until: int | None = None) -> float:
    """The median time the server itself took for ``job`` (its access log, from ``since``
    to ``until`` or its end)."""
    with log.open("rb") as stream:
        stream.seek(since)
        read = stream.read() if until is None else stream.read(until - since)
        lines = read.decode(errors="replace").splitlines()
    marker = f'"POST /jobs/{job}" 200 '
    taken = [float(line.rsplit(" ", 1)[1].rstrip("ms")) for line in lines if marker in line]
    return statistics.median(taken) if taken else float("nan")


def reads(client: httpx.Client, count: int, log: Path) -> None:
    rng = random.Random(3)
    ids = [f"{TYPES[i % len(TYPES)]}#demo#t{i:07d}" for i in rng.sample(range(count), 200)]
    since = log.stat().st_size if log.exists() else 0
    limit = {"limit": 50, "detail": "full"}
    verdict("first page (50)", median_ms(client, "list_task_statuses", [limit] * 50), "ms", 20)
    calls = [{"task_id": task_id} for task_id in ids]
    cold = log.stat().st_size if log.exists() else 0
    verdict("status, each task's first read", median_ms(client, "status", calls), "ms", 1.0)
    warm = log.stat().st_size if log.exists() else 0
    verdict("status, the same tasks again", median_ms(client, "status", calls * 3), "ms", 1.0)
    verdict("  with a lean client (http.client)", lean_median_ms(client, "status", calls * 3), "ms",
            1.0)  # fmt: skip
    print(
        f"    in the server: first reads {served_ms(log, cold, 'status', warm):.2f} ms, again"
        f" {served_ms(log, warm, 'status'):.2f} ms (a first read of a task's files since the"
        " server started may wait for the disk; polling a task is the second kind)"
    )
    floor = client_floor_ms(calls)
    print(f"    the clients' own time (a server answering a constant): httpx {floor[0]:.2f} ms,"
          f" http.client {floor[1]:.2f} ms")  # fmt: skip
    verdict("get_task_graph", median_ms(client, "get_task_graph", calls), "ms", 5.0)
    print("    in the server (its access log):", ", ".join(
        f"{job} {served_ms(log, since, job):.2f} ms"
        for job in ("list_task_statuses", "get_task_graph")
    ))  # fmt: skip


def streamed_post(client: httpx.Client, job: str) -> tuple[float, int]:
    """Seconds and bytes of an unpaged list's answer, not parsed (630 MB at a million)."""
    start = time.perf_counter()
    reply = client.post(f"/jobs/{job}", json={"arguments": {}})
    took = time.perf_counter() - start
    reply.raise_for_status()
    if not reply.content.startswith(b'{"answer":[') or not reply.content.endswith(b"}"):
        raise RuntimeError(f"{job}: not an answer: {reply.content[:200]!r}")
    return took, len(reply.content)


def full_list(proc: subprocess.Popen[bytes], client: httpx.Client, job: str, count: int) -> None:
    """The best of three calls (0.5 s is the target at 100,000 tasks), with the server's
    CPU seconds and memory over the three."""
    before, cpu = memory(proc.pid), cpu_seconds(proc.pid)
    took, size = min(streamed_post(client, job) for _ in range(3))
    cpu, after = (cpu_seconds(proc.pid) - cpu) / 3, memory(proc.pid)
    verdict(f"{job} {{}} (best of 3)", took, "s", 0.5 if count <= 100_000 else None)
    print(
        f"    {size / 1e6:.1f} MB; server CPU {cpu:.3f} s a call, load average"
        f" {os.getloadavg()[0]:.1f}; server VmRSS {before['VmRSS']:.0f} ->"
        f" {after['VmRSS']:.0f} MiB, VmHWM {before['VmHWM']:.0f} -> {after['VmHWM']:.0f} MiB"
    )


def full_lists(proc: subprocess.Popen[bytes], client: httpx.Client, count: int) -> None:
    full_list(proc, client, "list_task_statuses", count)
    full_list(proc, client, "list_task_ids", count)


def deletes(client: httpx.Client, victims: list[str], count: int, log: Path) -> None:
    since = log.stat().st_size if log.exists() else 0
    samples = []
    for task_id in victims:
        took, _, answer = timed_post(client, "delete_tasks", {"task_ids": [task_id]})
        assert answer["answer"] == [task_id], answer  # type: ignore[index]
        samples.append(took * 1000)
    target = 20.0 if count <= 100_000 else None
    verdict("delete_tasks of one task (median)", statistics.median(samples), "ms", target)
    print(
        f"    max {max(samples):.1f} ms; in the server {served_ms(log, since, 'delete_tasks'):.1f} ms"
    )


def run(root: Path, count: int, reuse_snapshot: bool) -> None:
    victims = prepare(root, count)
    empty_mib, empty_rate = empty_server(root)
    if reuse_snapshot and (root / "ws" / ".index" / "snapshot").exists():
        print(f"\n{count:,} tasks: first start skipped (--reuse-snapshot)")
    else:
        first_start(root, count)
    os.sync()
    start = time.monotonic()
    proc, port = serve(root, root / "ws")
    try:
        wait_port(port, start + 900)
        listen, listen_cpu = time.monotonic() - start, cpu_seconds(proc.pid)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
            health = first_health(client, start)
            health_cpu = cpu_seconds(proc.pid)
            print(f"\n{count:,} tasks, second start (with a snapshot): server pid {proc.pid}")
            verdict("port accepts", listen, "s", 1.0)
            print(f"    (server CPU until then {listen_cpu:.2f} s)")
            verdict("/health first answers", health, "s", 1.0)
            print(f"    (server CPU until then {health_cpu:.2f} s, load average"
                  f" {os.getloadavg()[0]:.1f})")  # fmt: skip
            startup(proc, client, count, start, "with a snapshot")
            memory_targets(proc, count, empty_mib)
            print(f"    server quiet {settled(proc):.1f} s after ready; reads from then on")
            reads(client, count, root / "logs" / "server.log")
            full_lists(proc, client, count)
            rate = submits(proc, client, f"at {count:,} tasks")
            print(f"    against the empty workspace: {rate / empty_rate:.2f}x (a submit costs"
                  " the same at any size when this is about 1)")  # fmt: skip
            deletes(client, victims, count, root / "logs" / "server.log")
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--workspace", type=Path, default=None, help="kept and reused")
    parser.add_argument(
        "--reuse-snapshot", action="store_true",
        help="skip the first start when --workspace has an index snapshot (a first start"
        " at 1,000,000 tasks takes minutes)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.workspace is not None:
        args.workspace.mkdir(parents=True, exist_ok=True)
        run(args.workspace, args.tasks, args.reuse_snapshot)
        return
    with tempfile.TemporaryDirectory(prefix="runyard-scale-") as tmp:
        run(Path(tmp), args.tasks, False)


if __name__ == "__main__":
    main()
