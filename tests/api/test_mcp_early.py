"""``runyard mcp`` without a server answers ``initialize`` before loading the MCP SDK, with
the answer the SDK gives, and the session carries on as if the SDK had answered it.

Each test drives a real ``runyard mcp`` over its stdin/stdout on a workspace in tmp_path
(bench/bench_mcp_start.py times it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runyard.api.mcp.early import answer_initialize, plain_initialize

TIMEOUT = 60


def initialize(ident: Any = 1, version: str = "2025-06-18", **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {},
                       "clientInfo": {"name": "t", "version": "1"}, **params}}  # fmt: skip


class McpProcess:
    """A ``runyard mcp`` child: send messages, read its answers line by line."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNYARD_")}
        argv = [sys.executable, "-m", "runyard", "mcp", "--workspace-dir",
                str(root / ".runyard"), "--log-dir", str(root / "logs")]  # fmt: skip
        self.stderr = root / "mcp-stderr.txt"
        with self.stderr.open("w") as stderr:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env,
                cwd=root,
            )  # fmt: skip

    def send(self, *messages: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
        self.proc.stdin.flush()

    def answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"runyard mcp ended: {self.stderr.read_text()[-2000:]}"
        return json.loads(line)

    def close(self) -> list[dict[str, Any]]:
        """Close stdin; every answer written after the last one read."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        rest = self.proc.stdout.read()
        self.proc.stdout.close()
        self.proc.wait(TIMEOUT)
        return [json.loads(line) for line in rest.splitlines() if line.strip()]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(TIMEOUT)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()


@pytest.fixture
def mcp(tmp_path: Path) -> Iterator[McpProcess]:
    proc = McpProcess(tmp_path)
    try:
        yield proc
    finally:
        proc.kill()


def sdk_answer(tmp_path: Path, request: dict[str, Any]) -> dict[str, Any]:
    """The SDK's own answer to ``request``: sent after a ping, it is no first line, so
    nothing answers it early."""
    proc = McpProcess(tmp_path)
    proc.send({"jsonrpc": "2.0", "id": "ping", "method": "ping"}, request)
    assert proc.answer()["id"] == "ping"
    got = proc.answer()
    proc.close()
    return got


def test_the_early_answer_is_the_sdks(tmp_path: Path) -> None:
    request = initialize("i-1", "2024-11-05", capabilities={"roots": {"listChanged": True}})
    early = McpProcess(tmp_path / "early")
    early.send(request)
    got = early.answer()
    early.close()
    assert got == sdk_answer(tmp_path / "sdk", request)
    assert got["result"]["protocolVersion"] == "2024-11-05"


def test_the_session_goes_on_after_the_early_answer_without_a_second_one(
    mcp: McpProcess,
) -> None:
    mcp.send(initialize(7))
    assert mcp.answer()["result"]["serverInfo"]["name"] == "runyard"
    mcp.send({"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 8, "method": "tools/list"})  # fmt: skip
    tools = mcp.answer()  # the SDK's own answer to 7 would come first
    assert tools["id"] == 8, tools
    assert "submit" in {tool["name"] for tool in tools["result"]["tools"]}
    mcp.send({"jsonrpc": "2.0", "id": 7, "method": "ping"})  # the id may be used again
    assert mcp.answer() == {"jsonrpc": "2.0", "id": 7, "result": {}}
    assert mcp.close() == []


REFUSED = {
    "no-client-version": initialize(1, clientInfo={"name": "t"}),
    "flag-not-bool": initialize(1, capabilities={"roots": {"listChanged": "yes please"}}),
    "capability-not-object": initialize(1, capabilities={"roots": []}),
    "jsonrpc-1": {**initialize(1), "jsonrpc": "1.0"},
}
ODD_BUT_ACCEPTED = {
    "unknown-member": {**initialize(1), "extra": 1},
    "experimental": initialize(1, capabilities={"experimental": {"x": {"y": [1]}}}),
    "float-id": initialize(1.0),
    "bool-id": initialize(True),  # the SDK reads it, but answers none
}


@pytest.mark.parametrize("name", [*REFUSED, *ODD_BUT_ACCEPTED])
def test_only_what_the_sdk_surely_accepts_is_answered_early(name: str) -> None:
    """Never a success the SDK would not give: every request the SDK's own models refuse
    is left to it (and a few it accepts, whose answer the early one might not match)."""
    from mcp.types import InitializeRequestParams, jsonrpc_message_adapter
    from pydantic import ValidationError

    request = {**REFUSED, **ODD_BUT_ACCEPTED}[name]
    line = json.dumps(request).encode() + b"\n"
    if name in REFUSED:
        with pytest.raises(ValidationError):
            jsonrpc_message_adapter.validate_json(line, by_name=False)
            InitializeRequestParams.model_validate(request["params"], by_name=False)
    assert plain_initialize(line) is None
    assert plain_initialize(json.dumps(initialize(1)).encode() + b"\n") is not None


def test_an_initialize_the_sdk_refuses_gets_its_refusal_only(mcp: McpProcess) -> None:
    mcp.send(REFUSED["no-client-version"])
    first = mcp.answer()
    assert first["error"]["message"] == "Invalid request parameters", first
    assert mcp.close() == []


def test_a_first_line_that_is_no_request_gets_no_answer(mcp: McpProcess) -> None:
    """The SDK answers no line it cannot read as JSON-RPC: nor does the early answer."""
    mcp.send(REFUSED["jsonrpc-1"], initialize("after"))
    assert mcp.answer()["id"] == "after"
    assert mcp.close() == []


def test_a_first_line_in_pieces_is_read_whole(mcp: McpProcess) -> None:
    assert mcp.proc.stdin is not None
    line = json.dumps(initialize(3)).encode() + b"\n"
    for piece in (line[:5], line[5:40], line[40:]):
        mcp.proc.stdin.write(piece)
        mcp.proc.stdin.flush()
    assert mcp.answer()["id"] == 3
    mcp.send({"jsonrpc": "2.0", "id": 4, "method": "tools/list"})
    assert mcp.answer()["id"] == 4


@pytest.mark.parametrize("asked", ["2025-06-18", "1999-01-01"])
def test_the_early_answer_negotiates_as_the_sdk(asked: str) -> None:
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

    read, write = os.pipe()
    try:
        line = json.dumps(initialize(2, asked)).encode() + b"\n"
        assert answer_initialize(line, "1", write) == 2
        answer = json.loads(os.read(read, 65536))
    finally:
        os.close(read)
        os.close(write)
    known = asked in HANDSHAKE_PROTOCOL_VERSIONS
    assert answer["result"]["protocolVersion"] == (asked if known else LATEST_HANDSHAKE_VERSION)


def test_the_early_answer_loads_no_sdk() -> None:
    code = (
        "import os, sys\n"
        "from runyard.api.mcp.early import answer_initialize\n"
        "r, w = os.pipe()\n"
        "line = sys.stdin.buffer.readline()\n"
        "print(answer_initialize(line, '9', w), os.read(r, 4096).decode().strip())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types',"
        " 'pydantic', 'anyio', 'starlette')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], input=json.dumps(initialize(5)) + "\n",
        capture_output=True, text=True, timeout=TIMEOUT, check=True,
    )  # fmt: skip
    answered, loaded = done.stdout.splitlines()
    ident, answer = answered.split(" ", 1)
    assert ident == "5" and json.loads(answer)["result"]["serverInfo"]["version"] == "9"
    assert loaded == "[]"
