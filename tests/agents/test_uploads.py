"""Streaming multipart parsing straight to disk, with limits and nothing left behind."""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from runyard.agents.catalog import SYNC_BYTES, UploadBlock, UploadSink
from runyard.agents.errors import AgentInvalid, BadRequest, UploadTooLarge
from runyard.api.uploads import FLUSH_BYTES, WRITE_BUDGET, WRITE_DEPTH, receive_upload

BOUNDARY = "xYzBoUnDaRy"
CONTENT_TYPE = f"multipart/form-data; boundary={BOUNDARY}"


def multipart(fields: dict[str, str], file_name: str | None, data: bytes) -> bytes:
    parts = []
    for name, value in fields.items():
        head = f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
        parts.append(head.encode() + value.encode() + b"\r\n")
    if file_name is not None:
        head = (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="{file_name}"\r\nContent-Type: text/csv\r\n\r\n'
        )
        parts.append(head.encode() + data + b"\r\n")
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


async def chunks(body: bytes, size: int = 7919) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def receive(body: bytes, folder: Path, limit: int = 1 << 30, on_open=None):  # type: ignore[no-untyped-def]
    def open_sink(fields: dict[str, str]) -> UploadSink:
        if on_open is not None:
            on_open(fields)
        return UploadSink(folder, limit)

    return asyncio.run(receive_upload(chunks(body), CONTENT_TYPE, open_sink))


def test_file_streams_to_disk_with_size_and_sha256(tmp_path: Path) -> None:
    data = os.urandom(3 * FLUSH_BYTES + 12345)
    fields = {"sessionId": "ses-1", "relativePath": "data/x.csv"}
    received = receive(multipart(fields, "x.csv", data), tmp_path)
    assert received.fields == fields
    assert received.file_name == "x.csv" and received.content_type == "text/csv"
    assert received.sink.size == len(data)
    assert received.sink.sha256 == hashlib.sha256(data).hexdigest()
    assert received.sink.path.read_bytes() == data


def test_fields_after_the_file_are_read_too(tmp_path: Path) -> None:
    body = multipart({}, "a.txt", b"abc")
    body = body.replace(f"--{BOUNDARY}--".encode(), b"") + multipart({"sessionId": "s"}, None, b"")
    assert receive(body, tmp_path).fields == {"sessionId": "s"}


def test_over_the_limit_stops_and_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(UploadTooLarge):
        receive(multipart({"sessionId": "s"}, "a.bin", b"x" * 5000), tmp_path, limit=4096)
    assert list(tmp_path.iterdir()) == []


def test_an_early_refusal_leaves_nothing(tmp_path: Path) -> None:
    def refuse(fields: dict[str, str]) -> None:
        raise AgentInvalid("closed")

    with pytest.raises(AgentInvalid):
        receive(multipart({"sessionId": "s"}, "a.bin", b"abc"), tmp_path, on_open=refuse)
    assert list(tmp_path.iterdir()) == []


def test_the_sink_opens_off_the_event_loop(tmp_path: Path) -> None:
    # opening checks the session in the store and creates the temp file: blocking work
    threads: list[bool] = []

    def on_open(fields: dict[str, str]) -> None:
        try:
            asyncio.get_running_loop()
            threads.append(False)
        except RuntimeError:  # no loop in this thread: a worker thread
            threads.append(True)

    data = os.urandom(50_000)
    received = receive(multipart({"sessionId": "s"}, "a.bin", data), tmp_path, on_open=on_open)
    assert threads == [True]
    assert received.sink.path.read_bytes() == data


@pytest.mark.parametrize(
    "body",
    [
        multipart({"sessionId": "s"}, None, b""),
        multipart({"other": "x"}, "a", b"abc"),
        multipart({"sessionId": "s" * 70000}, "a", b"abc"),
        multipart({}, "a", b"abc").replace(f"--{BOUNDARY}--".encode(), b"")
        + multipart({}, "b", b"def"),
    ],
    ids=["no-file", "unknown-field", "huge-field", "two-files"],
)
def test_malformed_forms_are_bad_requests(tmp_path: Path, body: bytes) -> None:
    with pytest.raises(BadRequest):
        receive(body, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_not_multipart_is_a_bad_request(tmp_path: Path) -> None:
    async def go() -> None:
        await receive_upload(chunks(b"{}"), "application/json", lambda f: UploadSink(tmp_path, 9))

    with pytest.raises(BadRequest, match="multipart/form-data"):
        asyncio.run(go())


def receive_in(pieces: list[bytes], folder: Path):  # type: ignore[no-untyped-def]
    async def feed() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    return asyncio.run(receive_upload(feed(), CONTENT_TYPE, lambda f: UploadSink(folder, 1 << 30)))


# file data that holds what looks like a delimiter but is not one, and CRs at its edges:
# the parser hands such bytes over from its own look-behind buffer
LOOKALIKE = b"\r\r\n--" + BOUNDARY[:-1].encode() + b"x\r\n--" + BOUNDARY.encode() + b"-x\r"


def test_a_chunk_edge_anywhere_in_a_delimiter_keeps_the_file_exact(tmp_path: Path) -> None:
    data = os.urandom(3000) + LOOKALIKE + os.urandom(3000) + b"\r\n\r"
    body = multipart({"sessionId": "s"}, "x.bin", data)
    opening = body.index(b'name="file"') - len(BOUNDARY) - 4
    closing = len(body) - len(f"\r\n--{BOUNDARY}--\r\n")
    lookalike = body.index(LOOKALIKE)
    edges = [
        *range(opening - 2, opening + len(BOUNDARY) + 8),
        *range(lookalike - 2, lookalike + len(LOOKALIKE) + 2),
        *range(closing - 3, len(body)),
    ]
    for edge in edges:
        folder = tmp_path / str(edge)
        folder.mkdir()
        received = receive_in([body[:edge], body[edge:]], folder)
        assert received.sink.path.read_bytes() == data, edge
        assert received.sink.sha256 == hashlib.sha256(data).hexdigest(), edge


def test_one_byte_chunks_keep_the_file_exact(tmp_path: Path) -> None:
    data = b"a\r" + LOOKALIKE + b"\r\n"
    body = multipart({"sessionId": "s"}, "x.bin", data)
    received = receive_in([body[i : i + 1] for i in range(len(body))], tmp_path)
    assert received.sink.path.read_bytes() == data
    assert received.sink.size == len(data)


@pytest.mark.parametrize("cut", ["in-headers", "in-data", "in-closing-boundary", "no-closing"])
def test_a_body_cut_short_is_a_bad_request_and_leaves_nothing(tmp_path: Path, cut: str) -> None:
    data = os.urandom(FLUSH_BYTES + 5000)  # a block was already written when it stops
    body = multipart({"sessionId": "s"}, "x.bin", data)
    end = {
        "in-headers": body.index(b"Content-Type: text/csv") + 5,
        "in-data": len(body) - 2000,
        "in-closing-boundary": len(body) - 6,
        "no-closing": len(body) - len(f"--{BOUNDARY}--\r\n"),
    }[cut]
    with pytest.raises(BadRequest, match="ended before its closing boundary"):
        receive(body[:end], tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_chunks_changed_after_they_are_fed_do_not_change_the_file(tmp_path: Path) -> None:
    data = os.urandom(2 * FLUSH_BYTES + 777)
    body = multipart({"sessionId": "s"}, "x.bin", data)

    async def reused_buffer() -> AsyncIterator[bytes]:
        buffer = bytearray()
        for start in range(0, len(body), 65536):
            buffer[:] = body[start : start + 65536]
            yield buffer  # type: ignore[misc]  # a client's reused buffer
            buffer[:] = b"\0" * len(buffer)

    received = asyncio.run(
        receive_upload(reused_buffer(), CONTENT_TYPE, lambda f: UploadSink(tmp_path, 1 << 30))
    )
    assert received.sink.path.read_bytes() == data


def test_blocks_land_at_their_offsets_in_any_order(tmp_path: Path) -> None:
    sink = UploadSink(tmp_path, 1 << 20)
    first, second = b"a" * 5000, b"b" * 7000
    sink.add(first[:3000])
    sink.add(first[3000:])
    one = sink.take()
    sink.add(second)
    two = sink.take()
    sink.write_block(two)
    sink.write_block(one)
    sink.hash_block(one)
    sink.hash_block(two)
    sink.finish()
    assert sink.path.read_bytes() == first + second
    assert sink.sha256 == hashlib.sha256(first + second).hexdigest()
    assert sink.size == 12000


def test_a_write_after_discard_goes_nowhere(tmp_path: Path) -> None:
    sink = UploadSink(tmp_path, 1 << 20)
    sink.add(b"late bytes")
    block = sink.take()
    sink.discard()
    sink.write_block(block)  # a worker thread still holding the block
    assert list(tmp_path.iterdir()) == []


def test_discard_waits_for_a_write_in_flight(tmp_path: Path) -> None:
    # more views than one pwritev takes: the write is several calls, and a descriptor
    # closed between two of them may already belong to another file
    piece = os.urandom(16384)
    sink = UploadSink(tmp_path, 1 << 30)
    for _ in range(6000):
        sink.add(piece)
    block = sink.take()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            sink.write_block(block)
        except BaseException as exc:
            failures.append(exc)

    worker = threading.Thread(target=write)
    worker.start()
    while not sink.fd_lock.locked() and worker.is_alive():
        time.sleep(0.0001)
    sink.discard()
    other = tmp_path / "other"
    fd = os.open(other, os.O_WRONLY | os.O_CREAT, 0o600)  # may reuse the sink's number
    worker.join(30)
    os.close(fd)
    assert failures == []
    assert other.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]


def upload_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("upload-")]


@pytest.mark.parametrize("slow", ["write_block", "hash_block"])
def test_a_slow_lane_holds_the_sender_back_and_nothing_is_lost(tmp_path: Path, slow: str) -> None:
    # a client faster than the disk (or the hash): what it sends waits in its socket, not in
    # our memory
    gate = threading.Event()

    class SlowDisk(UploadSink):
        def write_block(self, block: UploadBlock) -> None:
            if slow == "write_block":
                gate.wait(60)
            super().write_block(block)

        def hash_block(self, block: UploadBlock) -> None:
            if slow == "hash_block":
                gate.wait(60)
            super().hash_block(block)

    data = os.urandom((WRITE_DEPTH + 4) * FLUSH_BYTES + 999)
    body = multipart({"sessionId": "s"}, "x.bin", data)
    pulled = 0

    async def sender() -> AsyncIterator[bytes]:
        nonlocal pulled
        for start in range(0, len(body), 1 << 20):
            pulled = min(start + (1 << 20), len(body))
            yield body[start : start + (1 << 20)]

    async def go() -> tuple[int, object]:
        task = asyncio.create_task(
            receive_upload(sender(), CONTENT_TYPE, lambda f: SlowDisk(tmp_path, 1 << 30))
        )
        seen, still_since = -1, time.monotonic()
        while time.monotonic() - still_since < 0.5 and not task.done():
            await asyncio.sleep(0.02)
            if pulled != seen:
                seen, still_since = pulled, time.monotonic()
        held = pulled
        gate.set()
        return held, await task

    held, received = asyncio.run(go())
    # the blocks waiting for the disk, the one being hashed and the one being received
    assert held <= (WRITE_DEPTH + 2) * FLUSH_BYTES, f"{held / FLUSH_BYTES:.1f} blocks pulled"
    assert received.sink.path.read_bytes() == data  # type: ignore[attr-defined]
    assert received.sink.sha256 == hashlib.sha256(data).hexdigest()  # type: ignore[attr-defined]
    assert upload_threads() == []


def test_uploads_to_a_slow_disk_share_one_budget(tmp_path: Path) -> None:
    # many uploads to a stalled disk: beyond a block or two each, they hold WRITE_BUDGET
    # between them, not WRITE_DEPTH blocks each; and one that comes once the budget is
    # spent still goes on, a block at a time
    gate = threading.Event()

    class StalledDisk(UploadSink):
        def write_block(self, block: UploadBlock) -> None:
            gate.wait(60)
            super().write_block(block)

    uploads = 4
    data = os.urandom((WRITE_DEPTH + 4) * FLUSH_BYTES)
    body = multipart({"sessionId": "s"}, "x.bin", data)
    pulled = [0] * uploads

    async def sender(index: int) -> AsyncIterator[bytes]:
        for start in range(0, len(body), 1 << 20):
            pulled[index] = min(start + (1 << 20), len(body))
            yield body[start : start + (1 << 20)]

    def start(index: int) -> asyncio.Task[Any]:
        folder = tmp_path / str(index)
        folder.mkdir()
        opener = lambda f: StalledDisk(folder, 1 << 30)  # noqa: E731
        return asyncio.create_task(receive_upload(sender(index), CONTENT_TYPE, opener))

    async def until_still() -> int:
        seen, still_since = -1, time.monotonic()
        while time.monotonic() - still_since < 0.5:
            await asyncio.sleep(0.02)
            if sum(pulled) != seen:
                seen, still_since = sum(pulled), time.monotonic()
        return seen

    async def go() -> tuple[int, list[Any]]:
        tasks = [start(0), start(1)]
        assert await until_still() >= WRITE_BUDGET  # the first two spent the budget
        tasks += [start(2), start(3)]
        held = await until_still()
        gate.set()
        return held, list(await asyncio.gather(*tasks))

    held, received = asyncio.run(go())
    # each: the block being received and one being hashed; the budget between them
    assert held <= uploads * 2 * FLUSH_BYTES + WRITE_BUDGET + (1 << 20), held / FLUSH_BYTES
    assert min(pulled) == len(body)
    for each in received:
        assert each.sink.path.read_bytes() == data
        assert each.sink.sha256 == hashlib.sha256(data).hexdigest()
    assert upload_threads() == []


def test_the_file_is_synced_as_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the disk's cache is flushed as the upload goes: the last fsync has only the tail left
    synced: list[int] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        real(fd)
        synced.append(os.fstat(fd).st_size)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    data = os.urandom(2 * SYNC_BYTES + FLUSH_BYTES + 5)
    received = receive(multipart({"sessionId": "s"}, "x.bin", data), tmp_path)
    gaps = [end - start for start, end in zip([0, *synced[:-1]], synced, strict=True)]
    assert len(gaps) == 2 and all(SYNC_BYTES <= gap < SYNC_BYTES + FLUSH_BYTES for gap in gaps)
    assert received.sink.path.read_bytes() == data


def test_a_failed_write_stops_the_upload_and_leaves_nothing(tmp_path: Path) -> None:
    class FullDisk(UploadSink):
        def write_block(self, block: UploadBlock) -> None:
            if block.offset >= 2 * FLUSH_BYTES:
                raise OSError(28, "No space left on device")
            super().write_block(block)

    data = os.urandom((WRITE_DEPTH + 6) * FLUSH_BYTES)
    body = multipart({"sessionId": "s"}, "x.bin", data)
    with pytest.raises(OSError, match="No space left"):
        asyncio.run(
            receive_upload(
                chunks(body, 1 << 20), CONTENT_TYPE, lambda f: FullDisk(tmp_path, 1 << 30)
            )
        )
    assert list(tmp_path.iterdir()) == []
    deadline = time.monotonic() + 5
    while upload_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert upload_threads() == []
