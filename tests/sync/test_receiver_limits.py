"""Crafted tars posted with the admin token: a run id that leaves the log folder, names the
system cannot hold, a status nested 100,000 levels, sparse members that would expand to
a gigabyte, members past ``sync.max_task_mb`` or the disk's ``min_free_mb``. Each is a 4xx
(or 507) with a message, never a 500, and leaves the receiver as it was."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from crafted import (
    END,
    GIB,
    TASK_ID,
    file_block,
    folder_block,
    gnu_sparse_block,
    pax_sparse_block,
    send,
    status_block,
    status_json,
    tree,
)

from serverproc import ServerProcess, start_server

MIB = 1 << 20


@pytest.fixture(scope="module")
def receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One receiver with the default limits (sync.max_task_mb 10240: a gigabyte fits)."""
    srv = start_server(tmp_path_factory.mktemp("limits") / "b")
    try:
        yield srv
    finally:
        srv.stop()


def _refused(srv: ServerProcess, body: bytes, status: int, code: str) -> str:
    """Send ``body``; assert the refusal and that nothing was left; the message."""
    before = tree(srv)
    reply = send(srv, body)
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["code"] == code, error
    assert tree(srv) == before
    assert not (srv.workspace / "base" / TASK_ID).exists()
    return str(error["message"])


def _pwned(root: Path) -> list[str]:
    return [
        os.path.join(folder, name)
        for folder, dirs, names in os.walk(root)
        for name in dirs + names
        if "PWNED" in name
    ]


def test_a_run_id_that_leaves_the_log_folder_is_refused(receiver: ServerProcess) -> None:
    for run_id in ("../../../PWNED", "../PWNED", "/tmp/PWNED", "PWNED/../../x", ".", ""):
        body = file_block("task/status.json", status_json(run_id=run_id))
        body += file_block("log", b"from elsewhere") + END
        message = _refused(receiver, body, 422, "verification")
        assert "status.json" in message
    assert _pwned(receiver.root.parent) == []


def test_a_status_nested_100000_levels_deep_is_refused(receiver: ServerProcess) -> None:
    nested = b"[" * 100_000 + b"]" * 100_000
    raw = status_json()[:-1] + b', "result": {"deep": ' + nested + b"}}"
    message = _refused(receiver, status_block(raw) + END, 422, "verification")
    assert "status.json" in message
    meta = b'{"task_id": "' + TASK_ID.encode() + b'", "x": ' + nested + b"}"
    body = status_block() + file_block("task/metadata.json", meta) + END
    assert "metadata.json" in _refused(receiver, body, 422, "verification")


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(gnu_sparse_block("task/big.bin", GIB), id="gnu-S"),
        pytest.param(pax_sparse_block("task/big.bin", GIB, "0.1"), id="pax-0.1"),
        pytest.param(pax_sparse_block("task/big.bin", GIB, "1.0"), id="pax-1.0"),
    ],
)
def test_a_sparse_member_claiming_a_gigabyte_is_refused(
    receiver: ServerProcess, block: bytes
) -> None:
    body = status_block() + block + END
    assert len(body) < 5 * 1024  # a request of a few KB that would write 1 GiB
    message = _refused(receiver, body, 422, "bad_member")
    assert "sparse" in message or "not a file or folder" in message


def test_an_oversized_extended_header_is_refused(receiver: ServerProcess) -> None:
    body = status_block() + file_block("task/a.txt", pax={"comment": "c" * (2 * MIB)}) + END
    assert "extended header" in _refused(receiver, body, 422, "bad_member")


def test_one_name_as_a_file_and_a_folder_is_refused_not_a_500(receiver: ServerProcess) -> None:
    body = status_block() + file_block("task/a") + file_block("task/a/b") + END
    assert "cannot be written" in _refused(receiver, body, 422, "bad_member")
    body = status_block() + folder_block("task/c") + file_block("task/c") + END
    assert "cannot be written" in _refused(receiver, body, 422, "bad_member")
    body = status_block() + file_block("task/d") + folder_block("task/d") + END
    assert "task/d" in _refused(receiver, body, 422, "bad_member")


def test_a_truncated_or_garbled_stream_is_refused(receiver: ServerProcess) -> None:
    whole = status_block() + file_block("task/a.txt", b"y" * 5000) + END
    _refused(receiver, whole[: len(whole) - 3000], 422, "bad_member")
    _refused(receiver, b"\x1f\x8b" + bytes(2000), 422, "bad_member")


def test_a_task_id_outside_the_layout_is_refused(receiver: ServerProcess) -> None:
    body = status_block() + END
    for task_id in ("base#demo#..", "../../PWNED", "base#demo#a/../../b", "agent#x#y"):
        before = tree(receiver)
        reply = send(receiver, body, task_id)
        assert 400 <= reply.status_code < 500, (task_id, reply.text)
        assert tree(receiver) == before
    assert _pwned(receiver.root.parent) == []


def test_a_task_over_max_task_mb_is_refused_by_its_header_or_its_total(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "small", config={"sync": {"max_task_mb": 1}})
    try:
        one_member = status_block() + file_block("task/big.bin", bytes(2 * MIB)) + END
        assert "max_task_mb=1" in _refused(srv, one_member, 413, "too_large")
        # a header that claims more than it sends is refused before anything is read
        liar = status_block() + file_block("task/big.bin", b"x", size=5 * GIB) + END
        _refused(srv, liar, 413, "too_large")
        many = status_block() + b"".join(
            file_block(f"task/part-{i}.bin", bytes(100_000)) for i in range(12)
        )
        _refused(srv, many + END, 413, "too_large")
        fits = status_block() + file_block("task/small.bin", bytes(MIB // 2)) + END
        reply = send(srv, fits)
        assert reply.status_code == 200, reply.text
        assert (srv.workspace / "base" / TASK_ID / "small.bin").stat().st_size == MIB // 2
    finally:
        srv.stop()


def test_a_task_that_would_eat_min_free_mb_is_refused_with_507(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free // MIB
    srv = start_server(tmp_path / "full", config={"min_free_mb": max(free - 1000, 1)})
    try:
        body = status_block() + file_block("task/big.bin", b"x", size=2 * GIB) + END
        message = _refused(srv, body, 507, "insufficient_storage")
        assert "min_free_mb" in message
    finally:
        srv.stop()
