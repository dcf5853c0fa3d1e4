"""Streaming multipart parsing straight to disk, with limits and nothing left behind."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runyard.agents.catalog import UploadSink
from runyard.agents.errors import AgentInvalid, BadRequest, UploadTooLarge
from runyard.api.uploads import FLUSH_BYTES, receive_upload

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
