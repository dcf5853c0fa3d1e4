"""Tars built byte by byte, as an attacker holding the admin token would send them, and
what a receiver looks like before and after (for the receiver's tests)."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from serverproc import ServerProcess

TASK_ID = "base#demo#crafted"
TAR = {"content-type": "application/x-tar"}
GIB = 1 << 30
BLOCK = tarfile.BLOCKSIZE
END = bytes(2 * BLOCK)


def status_json(**fields: Any) -> bytes:
    status = {
        "task_id": TASK_ID,
        "run_id": "r1",
        "task_type": "base",
        "task_name": "demo",
        "state": "succeeded",
        "created_at": "2026-01-01T00:00:00Z",
        "finished_at": "2026-01-01T00:00:01Z",
    }
    status.update(fields)
    return json.dumps(status).encode()


def padded(body: bytes) -> bytes:
    return body + bytes(-len(body) % BLOCK)


def file_block(
    name: str, body: bytes = b"x", *, size: int | None = None, pax: dict[str, str] | None = None
) -> bytes:
    """A regular member's header (``size`` may lie about ``body``) and its body."""
    info = tarfile.TarInfo(name)
    info.size = len(body) if size is None else size
    info.pax_headers = pax or {}
    return info.tobuf(format=tarfile.PAX_FORMAT) + padded(body)


def folder_block(name: str) -> bytes:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info.tobuf(format=tarfile.PAX_FORMAT)


def status_block(raw: bytes | None = None) -> bytes:
    return file_block("task/status.json", status_json() if raw is None else raw)


def gnu_sparse_block(name: str, realsize: int) -> bytes:
    """An old-GNU sparse member (type ``S``): one byte stored at the end of ``realsize``."""
    info = tarfile.TarInfo(name)
    info.type = tarfile.GNUTYPE_SPARSE
    info.size = 1
    header = bytearray(info.tobuf(format=tarfile.GNU_FORMAT))
    header[386:398] = tarfile.itn(realsize - 1, 12, tarfile.GNU_FORMAT)  # offset
    header[398:410] = tarfile.itn(1, 12, tarfile.GNU_FORMAT)  # bytes stored there
    header[483:495] = tarfile.itn(realsize, 12, tarfile.GNU_FORMAT)
    header[148:156] = b" " * 8
    header[148:155] = b"%06o\0" % sum(header[:BLOCK])
    return bytes(header) + padded(b"x")


def pax_sparse_block(name: str, realsize: int, version: str) -> bytes:
    """A PAX GNU sparse member of format ``0.1`` or ``1.0``: one byte stored at the end."""
    if version == "1.0":
        sparse_map = padded(b"1\n%d\n1\n" % (realsize - 1))
        pax = {
            "GNU.sparse.major": "1", "GNU.sparse.minor": "0",
            "GNU.sparse.name": name, "GNU.sparse.realsize": str(realsize),
        }  # fmt: skip
        return file_block(f"task/GNUSparseFile.0/{name[5:]}", sparse_map + b"x", pax=pax)
    pax = {
        "GNU.sparse.size": str(realsize), "GNU.sparse.numblocks": "1",
        "GNU.sparse.map": f"{realsize - 1},1", "GNU.sparse.name": name,
    }  # fmt: skip
    return file_block(name, b"x", pax=pax)


def send(srv: ServerProcess, body: bytes, task_id: str = TASK_ID) -> httpx.Response:
    with srv.client(timeout=60) as client:
        return client.post(
            f"/api/v1/sync/tasks/{quote(task_id, safe='')}", content=body, headers=TAR
        )


VOLATILE = (".index", "agent", ".staging")  # the server's own; staging is checked empty


def tree(srv: ServerProcess) -> set[str]:
    """Every path under the receiver's workspace and log folder but the server's own
    bookkeeping (its index, its agent state); the staging area must be empty."""
    staging = srv.workspace / ".staging"
    assert not staging.exists() or list(staging.iterdir()) == []
    found = set()
    for top in (srv.workspace, srv.log_dir):
        for folder, dirs, names in os.walk(top):
            dirs[:] = [name for name in dirs if name not in VOLATILE]
            found.update(os.path.relpath(Path(folder, n), srv.root) for n in dirs + names)
    return found
