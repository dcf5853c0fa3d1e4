"""The server on asyncio's event loop and on uvloop's, side by side (the ``event_loop`` setting).

    .venv/bin/python bench/bench_loop.py [--tasks 300] [--requests 1500] [--rounds 6]

Two real servers on 127.0.0.1, one with ``event_loop: asyncio``, one with ``event_loop:
uvloop``, each with its own workspace and ``max_concurrent_tasks: 8``. In every round, each
server in turn runs ``--tasks`` demo tasks (``floor.http_round``: submit all from four client
threads, then wait for each), then answers ``--requests`` ``status`` calls from one client.
Prints, for each loop, the median over the rounds of tasks/s, the server's CPU a task
(its own, from ``/proc``; the launcher and the workers are the same code on both), and the
server's CPU a ``status`` request, then the ratio uvloop / asyncio of each. The servers
alternate within every round, so both see the same minutes of a busy machine. Every wait
is bounded; nothing is asserted on time.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from floor import http_round, proc_cpu  # noqa: E402

from runyard.client import Client  # noqa: E402
from serverproc import ServerProcess, start_server  # noqa: E402

LOOPS = ("asyncio", "uvloop")


@dataclass
class Rounds:
    tasks_per_second: list[float] = field(default_factory=list)
    ms_a_task: list[float] = field(default_factory=list)
    ms_a_request: list[float] = field(default_factory=list)

    def medians(self) -> tuple[float, float, float]:
        return (
            statistics.median(self.tasks_per_second),
            statistics.median(self.ms_a_task),
            statistics.median(self.ms_a_request),
        )


def server_cpu(srv: ServerProcess) -> float:
    return proc_cpu(srv.proc.pid)[0]


def task_round(srv: ServerProcess, count: int, prefix: str, into: Rounds) -> None:
    before = server_cpu(srv)
    took = http_round(srv, count, prefix, clients=4)
    into.tasks_per_second.append(count / took)
    into.ms_a_task.append(1000 * (server_cpu(srv) - before) / count)


def request_round(srv: ServerProcess, client: Client, task_id: str, count: int,
                  into: Rounds) -> None:  # fmt: skip
    before = server_cpu(srv)
    for _ in range(count):
        client.status(task_id)
    into.ms_a_request.append(1000 * (server_cpu(srv) - before) / count)


def out_of_time(signum: int, frame: object) -> None:
    raise SystemExit("bench_loop.py ran out of its time limit")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=300, help="demo tasks a server a round")
    parser.add_argument("--requests", type=int, default=1500, help="status calls a round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--dir", type=Path, default=None, help="where the workspaces go")
    parser.add_argument("--time-limit", type=int, default=900, help="seconds for the whole run")
    args = parser.parse_args()
    signal.signal(signal.SIGALRM, out_of_time)
    signal.alarm(args.time_limit)
    with tempfile.TemporaryDirectory(prefix="runyard-loop-", dir=args.dir) as tmp:
        root = Path(tmp)
        servers: dict[str, ServerProcess] = {}
        clients: dict[str, Client] = {}
        try:
            for loop in LOOPS:
                servers[loop] = start_server(
                    root / loop, config={"max_concurrent_tasks": 8, "event_loop": loop}
                )
                clients[loop] = Client(servers[loop].url, servers[loop].token, timeout=60)
            probe = {}
            for loop, srv in servers.items():
                http_round(srv, 50, "warm", clients=4)  # the launcher warm, the code loaded
                probe[loop] = clients[loop].submit("demo", x=1, y=2).task_id
            rounds = {loop: Rounds() for loop in LOOPS}
            started = time.monotonic()
            for number in range(args.rounds):
                for loop, srv in servers.items():
                    task_round(srv, args.tasks, f"r{number}", rounds[loop])
                    request_round(srv, clients[loop], probe[loop], args.requests, rounds[loop])
            print(f"{args.tasks} demo tasks and {args.requests} status calls a server a round, "
                  f"{args.rounds} rounds alternating ({time.monotonic() - started:.0f} s)")  # fmt: skip
            print(f"{'':18s}{'tasks/s':>10s}{'server CPU ms a task':>24s}"
                  f"{'server CPU ms a status':>26s}")  # fmt: skip
            figures = {loop: rounds[loop].medians() for loop in LOOPS}
            for loop in LOOPS:
                rate, task_ms, request_ms = figures[loop]
                print(f"{loop:18s}{rate:10.1f}{task_ms:24.2f}{request_ms:26.3f}")
            (rate_a, task_a, req_a), (rate_u, task_u, req_u) = figures["asyncio"], figures["uvloop"]
            print(f"{'uvloop / asyncio':18s}{rate_u / rate_a:9.2f}×{task_u / task_a:23.2f}×"
                  f"{req_u / req_a:25.2f}×")  # fmt: skip
        finally:
            for client in clients.values():
                client.close()
            for srv in servers.values():
                srv.stop()


if __name__ == "__main__":
    main()
