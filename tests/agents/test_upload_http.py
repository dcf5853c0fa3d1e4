"""Uploads over a real server: a body cut short leaves nothing, memory stays flat."""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx
import pytest
from api_helpers import agent_server, api, new_session

from serverproc import ServerProcess

MIB = 1 << 20
BOUNDARY = b"httpCutBoundary"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = agent_server(tmp_path_factory.mktemp("uploads"), "none", upload_max_bytes=512 * MIB)
    yield proc
    proc.stop()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with api(server) as client:
        yield client


def envelope(session_id: str) -> tuple[bytes, bytes]:
    head = (
        b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="sessionId"\r\n\r\n'
        + session_id.encode() + b"\r\n--" + BOUNDARY
        + b'\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n\r\n'
    )  # fmt: skip
    return head, b"\r\n--" + BOUNDARY + b"--\r\n"


def post_raw(server: ServerProcess, pieces: Iterable[bytes], length: int | None) -> bytes:
    """POST pieces on a plain socket: with Content-Length, or chunked when it is None."""
    host, _, port = server.url.removeprefix("http://").partition(":")
    framing = f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
    head = (
        f"POST /api/v1/artifacts/upload HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n"
        f"authorization: Bearer {server.token}\r\n{framing}\r\n"
        f"content-type: multipart/form-data; boundary={BOUNDARY.decode()}\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head.encode())
        for piece in pieces:
            if length is None:
                sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            else:
                sock.sendall(piece)
        if length is None:
            sock.sendall(b"0\r\n\r\n")
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return reply


def uploads(server: ServerProcess) -> list[str]:
    return sorted(p.name for p in (server.workspace / "agent" / "uploads").iterdir())


def test_a_chunked_body_cut_before_its_closing_boundary_is_a_400(
    server: ServerProcess, client: httpx.Client
) -> None:
    head, _ = envelope(new_session(client))
    before = uploads(server)
    # more than one block: part of the file was on disk when the body ended
    reply = post_raw(server, [head, os.urandom(5 * MIB), os.urandom(3 * MIB)], None)
    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line.split()[1] == b"400", reply[:300]
    assert b"ended before its closing boundary" in rest
    assert uploads(server) == before


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_a_large_upload_keeps_server_memory_flat(
    server: ServerProcess, client: httpx.Client
) -> None:
    session_id = new_session(client)
    head, tail = envelope(session_id)
    block = os.urandom(MIB)
    size = 384 * MIB
    peak_before = peak_rss_kib(server.proc.pid)
    reply = post_raw(server, [head, *([block] * (size // MIB)), tail], len(head) + size + len(tail))
    assert reply.split()[1] == b"201", reply[:300]
    growth_mib = (peak_rss_kib(server.proc.pid) - peak_before) / 1024
    assert growth_mib < 80, f"peak RSS grew by {growth_mib:.0f} MiB for a {size // MIB} MiB upload"
    artifacts = client.get("/artifacts", params={"sessionId": session_id}).json()["items"]
    expected = hashlib.sha256(block * (size // MIB)).hexdigest()
    assert [(a["size"], a["sha256"]) for a in artifacts] == [(size, expected)]
