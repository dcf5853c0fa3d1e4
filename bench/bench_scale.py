"""A real server at scale: time to listen, time to index ready, the unpaged lists, delete one.

    .venv/bin/python bench/bench_scale.py [--tasks 100000] [--workspace DIR]

Generates the task folders of bench_repository (kept in ``--workspace`` to be reused),
starts ``runyard serve`` on them and prints: the time until the port accepts, until
``/health`` shows no ``indexing``, the unpaged ``list_task_statuses {}`` and
``list_task_ids {}`` (time, bytes, the server's VmRSS/VmHWM around them) and ``delete_tasks``
of one task whose log lies in the log folder (median of several). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from bench_repository import generate  # noqa: E402

DELETES = 7


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


def wait_ready(client: httpx.Client, deadline: float) -> None:
    while time.monotonic() < deadline:
        answer = client.get("/health").json()["answer"]
        if "indexing" not in answer:
            return
        time.sleep(0.02)
    raise RuntimeError("the index never became ready")


def timed_post(client: httpx.Client, job: str, arguments: dict) -> tuple[float, int, object]:
    start = time.perf_counter()
    reply = client.post(f"/jobs/{job}", json={"arguments": arguments})
    took = time.perf_counter() - start
    reply.raise_for_status()
    return took, len(reply.content), reply.json()


def run(root: Path, count: int) -> None:
    victims = prepare(root, count)
    port = free_port()
    argv = [
        sys.executable, "-m", "runyard", "serve", "--host", "127.0.0.1", "--port", str(port),
        "--workspace-dir", str(root / "ws"), "--log-dir", str(root / "logs"), "--no-auth",
    ]  # fmt: skip
    os.sync()
    start = time.monotonic()
    errors = (root / "server.err").open("w")  # why a server that never listened died
    proc = subprocess.Popen(argv, cwd=root, stdout=subprocess.DEVNULL, stderr=errors)
    try:
        wait_port(port, start + 900)
        listen = time.monotonic() - start
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
            wait_ready(client, start + 900)
            ready = time.monotonic() - start
            print(f"\n{count:,} tasks: server pid {proc.pid}")
            print(f"  time to listen                      {listen:8.3f} s")
            print(f"  time to index ready                 {ready:8.3f} s")
            before = memory(proc.pid)
            took, size, _ = timed_post(client, "list_task_statuses", {})
            after = memory(proc.pid)
            print(f"  list_task_statuses {{}} (unpaged)     {took:8.3f} s  {size / 1e6:6.1f} MB")
            print(
                f"    server VmRSS {before['VmRSS']:.0f} -> {after['VmRSS']:.0f} MiB,"
                f" VmHWM {before['VmHWM']:.0f} -> {after['VmHWM']:.0f} MiB"
            )
            took, size, _ = timed_post(client, "list_task_ids", {})
            print(f"  list_task_ids {{}}                    {took:8.3f} s  {size / 1e6:6.1f} MB")
            samples = []
            for task_id in victims:
                took, _, answer = timed_post(client, "delete_tasks", {"task_ids": [task_id]})
                assert answer["answer"] == [task_id], answer  # type: ignore[index]
                samples.append(took * 1000)
            print(
                f"  delete_tasks of one task            median {statistics.median(samples):.1f} ms"
                f"  max {max(samples):.1f} ms"
            )
    finally:
        proc.terminate()
        proc.wait(30)
        errors.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--workspace", type=Path, default=None, help="kept and reused")
    args = parser.parse_args()
    if args.workspace is not None:
        args.workspace.mkdir(parents=True, exist_ok=True)
        run(args.workspace, args.tasks)
        return
    with tempfile.TemporaryDirectory(prefix="runyard-scale-") as tmp:
        run(Path(tmp), args.tasks)


if __name__ == "__main__":
    main()
