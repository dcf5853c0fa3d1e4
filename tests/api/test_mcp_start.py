"""``runyard mcp`` beside a running server starts fast: it relays without the MCP SDK.

Timing is compared, never gated on an absolute figure: the relay's CPU time up to its
answer to ``initialize`` is measured side by side with a Python that imports only the
libraries the relay cannot do without (:data:`NEEDED`), medians of alternating rounds;
the imports of the real command are read from ``python -X importtime``. The SDK alone
costs the relay about twice that baseline again (1.2x here without it, 2.7x with it).
"""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from serverproc import ServerProcess, start_server

ROUNDS = 3
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "t", "version": "1"}},
}  # fmt: skip
NEEDED = "import httpx, anyio, pydantic_settings, typer"
MAX_RATIO = 2.0
SDK = ("mcp", "mcp_types", "fastapi", "runyard.api.app", "runyard.runtime", "runyard.api.jobs")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("mcp-start") / "srv")
    try:
        yield proc
    finally:
        proc.stop()


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def relay_once(server: ServerProcess, cwd: Path, *python_options: str) -> tuple[float, str]:
    """CPU seconds of one ``runyard mcp`` that answers initialize and ends; its stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
    argv = [sys.executable, *python_options, "-m", "runyard", "mcp",
            "--workspace-dir", str(server.workspace), "--log-dir", str(server.log_dir)]  # fmt: skip
    errors = cwd / "relay-stderr.txt"
    before = child_cpu()
    with errors.open("w") as stderr:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=cwd
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
        proc.stdin.flush()
        line = proc.stdout.readline()  # stdin stays open until the answer is in
        proc.stdin.close()
        proc.stdout.close()
        proc.wait(60)
    took = child_cpu() - before
    answer = json.loads(line)
    assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "runyard", answer
    return took, errors.read_text()


def baseline_once() -> float:
    before = child_cpu()
    subprocess.run([sys.executable, "-c", NEEDED], check=True, timeout=60)
    return child_cpu() - before


def test_the_relay_loads_neither_the_sdk_nor_the_server(
    server: ServerProcess, tmp_path: Path
) -> None:
    _, stderr = relay_once(server, tmp_path, "-X", "importtime")
    loaded = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", stderr, re.M))
    assert "runyard.api.mcp.relay" in loaded  # it did relay
    heavy = sorted(m for m in loaded if m in SDK or m.startswith(tuple(h + "." for h in SDK)))
    assert heavy == [], heavy


def test_the_relay_answers_within_a_small_multiple_of_its_libraries_import(
    server: ServerProcess, tmp_path: Path
) -> None:
    relay, needed = [], []
    for _ in range(ROUNDS):  # alternating, so a busy machine slows both alike
        relay.append(relay_once(server, tmp_path)[0])
        needed.append(baseline_once())
    ratio = statistics.median(relay) / statistics.median(needed)
    assert ratio < MAX_RATIO, (relay, needed)
