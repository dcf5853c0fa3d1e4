"""How soon ``runyard mcp`` without a server answers ``initialize``, and then ``tools/list``.

Each round spawns ``runyard mcp`` on a temporary workspace (no server runs for it), sends
``initialize`` over stdin and times the answer, then sends ``notifications/initialized``
and ``tools/list`` and times that answer too (the SDK and the services loaded by then);
``python -c pass`` runs in the same rounds as the baseline. Prints the medians of
``--runs`` rounds and their ratios to the baseline; the aim is ``initialize`` under 1 s on
a quiet machine. A measurement, never a gate::

    python bench/bench_mcp_start.py --runs 9
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PYTHON = sys.executable
RUNYARD = shutil.which("runyard", path=str(Path(PYTHON).parent)) or "runyard"
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "bench", "version": "1"}},
}  # fmt: skip
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def send(proc: subprocess.Popen[bytes], message: dict) -> None:
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(message) + "\n").encode())
    proc.stdin.flush()


def answer(proc: subprocess.Popen[bytes], ident: int) -> dict:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            sys.exit(f"runyard mcp ended before answering {ident}")
        got = json.loads(line)
        if got.get("id") == ident:
            return got


def one_round(root: Path, env: dict[str, str]) -> tuple[float, float]:
    """Seconds from the spawn to the answer of initialize, and of tools/list."""
    argv = [RUNYARD, "mcp", "--workspace-dir", str(root / ".runyard"),
            "--log-dir", str(root / "logs")]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=env, cwd=root,
    )  # fmt: skip
    try:
        send(proc, INITIALIZE)
        assert "result" in answer(proc, 1)
        initialized = time.perf_counter() - start
        send(proc, INITIALIZED)
        send(proc, TOOLS)
        assert answer(proc, 2)["result"]["tools"]
        return initialized, time.perf_counter() - start
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(60)


def baseline() -> float:
    start = time.perf_counter()
    subprocess.run([PYTHON, "-c", "pass"], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="runyard-bench-mcp-") as tmp:
        one_round(Path(tmp), env)  # untimed: the workspace and the bytecode are made
        rounds = [(one_round(Path(tmp), env), baseline()) for _ in range(args.runs)]
    init = statistics.median(r[0][0] for r in rounds)
    tools = statistics.median(r[0][1] for r in rounds)
    base = statistics.median(r[1] for r in rounds)
    print(f"{'':<28} {'median ms':>9} {'x python':>9}")
    for name, value in (("python -c pass", base), ("runyard mcp: initialize", init),
                        ("runyard mcp: tools/list", tools)):  # fmt: skip
        print(f"{name:<28} {value * 1e3:9.0f} {value / base:9.2f}")
    verdict = "within" if init < 1.0 else "OVER"
    print(f"medians of {args.runs} rounds; initialize under 1 s: {verdict}")
    print("load average (1, 5, 15 min): before {:.2f} {:.2f} {:.2f}, after {:.2f} {:.2f} {:.2f}"
          .format(*load, *os.getloadavg()))  # fmt: skip


if __name__ == "__main__":
    main()
