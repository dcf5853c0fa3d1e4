"""Soak: N rounds of kill -9 of the server at a random moment while submits are in flight.

    python bench/bench_soak.py --rounds 10 --submits 8

Each round starts a server on one workspace, fires keyed submits from threads, kills the
server with SIGKILL after a random delay, restarts it, re-sends every submit with its key
and checks: each key names exactly one task, every status parses and ends final, no
folder lacks a status, no task ran twice. Prints rounds, tasks and anomalies.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from serverproc import ServerProcess, start_server  # noqa: E402

FINAL = {"succeeded", "failed", "cancelled"}


def submit(server: ServerProcess, key: str) -> str | None:
    body = {"arguments": {"task": "command", "command": f"echo {key}", "shell": True}}
    try:
        with server.client(15) as http:
            reply = http.post("/jobs/submit", json=body, headers={"Idempotency-Key": key})
        return str(reply.json()["answer"]["task_id"])
    except (httpx.HTTPError, KeyError, TypeError, ValueError):
        return None


def anomalies_of(server: ServerProcess, keys: list[str]) -> tuple[int, list[str]]:
    found: list[str] = []
    ids = [submit(server, key) for key in keys]
    if None in ids or len(set(ids)) != len(ids):
        found.append(f"keys not answered once each: {ids}")
    deadline = time.monotonic() + 60
    listed: list[dict] = []  # type: ignore[type-arg]
    while time.monotonic() < deadline:
        listed = server.call("list_task_statuses", limit=10_000)["answer"]
        if all(s["state"] in FINAL for s in listed):
            break
        time.sleep(0.2)
    found += [f"not final: {s['task_id']}" for s in listed if s["state"] not in FINAL]
    base = server.workspace / "base"
    for entry in base.iterdir():
        if entry.name.endswith(".claim"):
            continue
        if entry.name.startswith(".") or not (entry / "status.json").exists():
            found.append(f"half-made: {entry.name}")
            continue
        try:
            json.loads((entry / "status.json").read_bytes())
        except ValueError:
            found.append(f"corrupt status: {entry.name}")
        events = (entry / "events.jsonl").read_text().splitlines()
        if sum(json.loads(e).get("state") == "running" for e in events) > 1:
            found.append(f"ran twice: {entry.name}")
    return len(listed), found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--submits", type=int, default=8)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="runyard-soak-"))
    try:
        config = {"min_free_mb": 0, "max_concurrent_tasks": 4}
        keys: list[str] = []
        anomalies: list[str] = []
        tasks = 0
        for round_no in range(args.rounds):
            server = start_server(root, config=config)
            batch = [f"r{round_no}-{i}" for i in range(args.submits)]
            keys += batch
            threads = [threading.Thread(target=submit, args=(server, k)) for k in batch]
            for thread in threads:
                thread.start()
            time.sleep(rng.uniform(0.0, 0.3))
            server.proc.send_signal(signal.SIGKILL)
            for thread in threads:
                thread.join(30)
            server.stop(keep_runs=True)
            server = start_server(root, config=config)
            try:
                tasks, found = anomalies_of(server, keys)
            finally:
                server.stop(keep_runs=round_no + 1 < args.rounds)
            anomalies += [f"round {round_no}: {a}" for a in found]
    finally:  # its workspace: nothing reads it after the figures
        shutil.rmtree(root, ignore_errors=True)
    print(f"rounds={args.rounds} tasks={tasks} keys={len(keys)} anomalies={len(anomalies)}")
    for line in anomalies:
        print(" ", line)


if __name__ == "__main__":
    main()
