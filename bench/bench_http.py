"""HTTP figures: submit -> succeeded latency, throughput, progress written -> SSE received.

Starts a real server on 127.0.0.1 with a temporary workspace and prints medians; nothing
here asserts on time. Usage: ``python bench/bench_http.py [--tasks 100,1000]``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from serverproc import ServerProcess, read_sse, start_server  # noqa: E402

DEADLINE_SECONDS = 300


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency(srv: ServerProcess, runs: int) -> list[float]:
    out = []
    with srv.client() as client:
        for index in range(runs):
            started = time.perf_counter()
            handle = client.post("/jobs/submit", json={"arguments": {"task": "demo", "task_name": f"lat-{index}", "x": 1, "y": 2}}).json()["answer"]
            waited = client.post("/jobs/wait_task", json={"arguments": {
                "task_id": handle["task_id"], "run_id": handle["run_id"], "poll_interval": 1,
            }}).json()  # fmt: skip
            if waited.get("answer", {}).get("state") != "succeeded":
                raise RuntimeError(f"wait_task answered {waited}")
            out.append((time.perf_counter() - started) * 1000)
    return out


def throughput(srv: ServerProcess, count: int, prefix: str, threads: int = 4) -> tuple[float, float]:
    """Submit ``count`` demo tasks from ``threads`` keep-alive connections, then wait for
    each; answers (succeeded tasks/s, client CPU seconds). http.client keeps the load
    generator's own cost small next to the server's."""
    host, port = srv.url.removeprefix("http://").split(":")
    handles: list[dict] = []
    lock = threading.Lock()

    def post(conn: http.client.HTTPConnection, job: str, arguments: dict) -> dict:
        conn.request("POST", f"/jobs/{job}", json.dumps({"arguments": arguments}),
                     {"content-type": "application/json", **srv.headers})
        return json.loads(conn.getresponse().read())

    def submitter(indexes: range) -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=DEADLINE_SECONDS)
        for index in indexes:
            answer = post(conn, "submit", {"task": "demo", "task_name": f"{prefix}-{index}", "x": index, "y": 1})
            with lock:
                handles.append(answer["answer"])
        conn.close()

    def waiter(mine: list[dict]) -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=DEADLINE_SECONDS)
        for handle in mine:
            reply = post(conn, "wait_task", {"task_id": handle["task_id"], "run_id": handle["run_id"], "poll_interval": 1})
            assert reply["success"], reply
        conn.close()

    cpu = time.process_time()
    started = time.perf_counter()
    _in_threads(submitter, [range(i, count, threads) for i in range(threads)])
    _in_threads(waiter, [handles[i::threads] for i in range(threads)])
    return count / (time.perf_counter() - started), time.process_time() - cpu


def _in_threads(target: Callable[[Any], None], parts: list[Any]) -> None:
    workers = [threading.Thread(target=target, args=(part,)) for part in parts]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(DEADLINE_SECONDS)


def sse_latency(srv: ServerProcess, runs: int) -> list[float]:
    delays: list[float] = []
    with srv.client() as client:
        for index in range(runs):
            args = {"task": "command", "task_name": f"sse-{index}", "command": "sleep 0.2"}
            handle = client.post("/jobs/submit", json={"arguments": args}).json()["answer"]
            body = {"arguments": {"task_id": handle["task_id"], "poll_interval": 5}}
            with client.stream("POST", "/jobs/stream_task/events", json=body) as reply:
                buffer: list[str] = []
                for line in reply.iter_lines():
                    buffer.append(line)
                    if line != "":
                        continue
                    received = time.time()
                    for event in read_sse(buffer):
                        if event["event"] == "progress":
                            data = event["data"]
                            written = max(_ts(data.get("started_at")), _ts(data.get("finished_at")))
                            if received - written < 1.0:  # skip events replayed from before connecting
                                delays.append((received - written) * 1000)
                    buffer = []
    return delays


def _ts(value: str | None) -> float:
    if not value:
        return 0.0
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", default="100,1000")
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        srv = start_server(Path(tmp), config={"max_concurrent_tasks": args.concurrency})
        try:
            lat = latency(srv, 30)
            print(f"submit->succeeded latency over HTTP (demo, 30 runs): p50 {pct(lat, .5):.1f} ms, p90 {pct(lat, .9):.1f} ms")
            for count in (int(n) for n in args.tasks.split(",")):
                rate, client_cpu = throughput(srv, count, f"tp{count}")
                print(f"throughput, {count} demo tasks, max_concurrent_tasks={args.concurrency}: {rate:.1f} succeeded/s (load generator used {client_cpu:.1f} CPU s)")
            delays = sse_latency(srv, 15)
            if delays:
                print(f"progress written -> SSE received: p50 {pct(delays, .5):.1f} ms, p90 {pct(delays, .9):.1f} ms over {len(delays)} events")
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
