"""``runyard mcp`` never hangs: it ends when stdin closes, and every call gets an answer.

Driven as a desktop client drives it: JSON-RPC lines on a pipe to a real ``runyard mcp``
beside a real server on 127.0.0.1 (relay mode), or over the workspace files (file mode).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from serverproc import ServerProcess, kill_strays, start_server

EXIT_SECONDS = 2.0
DEAD_SERVER_SECONDS = 10.0  # a call made after the server died
# the relay's settings, shorter than their defaults (5 s, 10 s) so a stopped server is
# found out in seconds; a pending call answers within both and some slack
PROBE_SECONDS, CONNECT_SECONDS = 0.5, 3.0
RELAY_ENV = {"RUNYARD_MCP_RELAY_PROBE_SECONDS": str(PROBE_SECONDS),
             "RUNYARD_MCP_RELAY_CONNECT_SECONDS": str(CONNECT_SECONDS)}  # fmt: skip
STOPPED_SERVER_SECONDS = PROBE_SECONDS + CONNECT_SECONDS + 5.0  # one pending while it stops


class StdioClient:
    """A ``runyard mcp`` subprocess spoken to in JSON-RPC lines."""

    def __init__(self, workspace: Path, log_dir: Path, cwd: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
        env.update(RELAY_ENV)
        argv = [sys.executable, "-m", "runyard", "mcp", "--workspace-dir", str(workspace),
                "--log-dir", str(log_dir)]  # fmt: skip
        self.stderr = cwd / "mcp-stderr.txt"
        with self.stderr.open("w") as errors:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
                env=env, cwd=cwd,
            )  # fmt: skip
        self.next_id = 0

    @property
    def stdin(self) -> IO[bytes]:
        assert self.proc.stdin is not None
        return self.proc.stdin

    def send(self, message: dict[str, Any]) -> None:
        self.stdin.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())
        self.stdin.flush()

    def request(self, method: str, **params: Any) -> int:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        return self.next_id

    def call_tool(self, name: str, **arguments: Any) -> int:
        return self.request("tools/call", name=name, arguments=arguments)

    def answer(self, timeout: float) -> dict[str, Any] | None:
        """The next line on stdout within ``timeout`` seconds, or None."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def initialize(self) -> None:
        asked = self.request(
            "initialize",
            protocolVersion="2025-06-18",
            capabilities={},
            clientInfo={"name": "test", "version": "1"},
        )
        answer = self.answer(60)
        assert answer is not None and answer["id"] == asked and "result" in answer, answer
        self.send({"method": "notifications/initialized"})

    def seconds_to_exit_after_stdin_closes(self, limit: float) -> float:
        started = time.monotonic()
        self.stdin.close()
        try:
            self.proc.wait(limit)
        except subprocess.TimeoutExpired:
            return float("inf")
        return time.monotonic() - started

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()


@pytest.fixture
def relayed(tmp_path: Path) -> Iterator[tuple[ServerProcess, StdioClient]]:
    server = start_server(tmp_path / "srv")
    client = StdioClient(server.workspace, server.log_dir, tmp_path)
    try:
        client.initialize()
        yield server, client
    finally:
        client.close()
        server.stop()


def submit_sleep(client: StdioClient, seconds: int) -> dict[str, Any]:
    asked = client.call_tool("submit", task="command", command=f"sleep {seconds}")
    answer = client.answer(30)
    assert answer is not None and answer["id"] == asked, answer
    handle = answer["result"]["structuredContent"]
    assert handle["success"] is True, handle
    return handle["answer"]


def test_relay_exits_when_stdin_closes_with_a_call_pending(
    relayed: tuple[ServerProcess, StdioClient],
) -> None:
    _, client = relayed
    handle = submit_sleep(client, 60)
    client.call_tool("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
    assert client.answer(0.5) is None  # the wait is pending at the server
    took = client.seconds_to_exit_after_stdin_closes(10)
    assert took < EXIT_SECONDS, f"runyard mcp ran {took:.1f} s after its stdin closed"


def test_file_mode_exits_when_stdin_closes(tmp_path: Path) -> None:
    client = StdioClient(tmp_path / "ws", tmp_path / "logs", tmp_path)
    try:
        client.initialize()
        submit_sleep(client, 60)
        took = client.seconds_to_exit_after_stdin_closes(10)
    finally:
        client.close()
        kill_strays(tmp_path)
    assert took < EXIT_SECONDS, f"runyard mcp ran {took:.1f} s after its stdin closed"


def test_a_call_after_the_server_died_answers_an_error(
    relayed: tuple[ServerProcess, StdioClient],
) -> None:
    server, client = relayed
    server.proc.kill()
    server.proc.wait(10)
    started = time.monotonic()
    asked = client.call_tool("list_task_statuses")
    answer = client.answer(DEAD_SERVER_SECONDS)
    assert answer is not None, f"no answer within {DEAD_SERVER_SECONDS} s"
    assert answer["id"] == asked and "result" not in answer, answer
    assert server.url in answer["error"]["message"], answer
    assert time.monotonic() - started < DEAD_SERVER_SECONDS
    # the relay goes on answering, and still ends with its stdin
    again = client.call_tool("list_task_statuses")
    second = client.answer(DEAD_SERVER_SECONDS)
    assert second is not None and second["id"] == again and "error" in second, second
    assert client.seconds_to_exit_after_stdin_closes(10) < EXIT_SECONDS


def test_a_pending_call_answers_an_error_when_the_server_stops_answering(
    relayed: tuple[ServerProcess, StdioClient],
) -> None:
    server, client = relayed
    handle = submit_sleep(client, 60)
    asked = client.call_tool("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
    assert client.answer(0.5) is None
    os.kill(server.proc.pid, signal.SIGSTOP)  # its connections stay open, and say nothing
    try:
        answer = client.answer(STOPPED_SERVER_SECONDS)
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    assert answer is not None, f"no answer within {STOPPED_SERVER_SECONDS} s"
    assert answer["id"] == asked and "stopped answering" in answer["error"]["message"], answer
