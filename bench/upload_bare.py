"""A bare ASGI app that takes the steps a runyard upload must, and nothing else: what an
upload over HTTP costs in Python on this machine without runyard.

    python bench/upload_bare.py --port N --folder DIR   # serves until killed

It is served by uvicorn with httptools, on uvloop's loop where it is installed (uvicorn's
``auto``), as runyard is, with no middleware, no routing, no session and no catalog. Each
``POST`` body is parsed by python-multipart's streaming parser
(the parts' bytes kept as views, as runyard keeps them); every 4 MiB the block is hashed
(sha256) in one worker thread and written in another, both waited for before the next block
is handed over; at the end the file is fsynced and closed, and the answer names its size and
hash. ``bench_agents.py`` uploads the same file to it and to runyard in the same rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import secrets
import sys
from pathlib import Path
from typing import Any

import uvicorn
from python_multipart.multipart import MultipartParser, parse_options_header

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from runyard.api.allocator import keep_freed_buffers  # noqa: E402

BLOCK = 4 << 20


class BareUpload:
    """One upload: the file part's bytes as views, written and hashed a block at a time."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / f"bare-{secrets.token_hex(8)}"
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
        self.digest = hashlib.sha256()
        self.views: list[memoryview] = []
        self.pending = 0
        self.size = 0
        self.in_file = False
        self.headers = bytearray()

    def on_part_begin(self) -> None:
        self.in_file = False
        self.headers.clear()

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self.headers += data[start:end]

    def on_headers_finished(self) -> None:
        self.in_file = b'name="file"' in self.headers  # the small fields are skipped

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self.in_file:
            self.views.append(memoryview(data)[start:end])
            self.pending += end - start

    def take(self) -> tuple[list[memoryview], int]:
        views, offset = self.views, self.size
        self.size += self.pending
        self.views, self.pending = [], 0
        return views, offset

    def hash_block(self, views: list[memoryview]) -> None:
        for view in views:
            self.digest.update(view)

    def write_block(self, views: list[memoryview], offset: int) -> None:
        os.pwritev(self.fd, views, offset)


def bare_app(folder: Path) -> Any:
    """The ASGI app, keeping each upload in ``folder`` until it has answered."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive_upload(folder, scope, receive, send)

    return app


async def receive_upload(folder: Path, scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    headers = dict(scope["headers"])
    _, options = parse_options_header(headers.get(b"content-type", b"").decode("latin-1"))
    upload = BareUpload(folder)
    parser = MultipartParser(options[b"boundary"], {
        "on_part_begin": upload.on_part_begin,
        "on_header_value": upload.on_header_value,
        "on_headers_finished": upload.on_headers_finished,
        "on_part_data": upload.on_part_data,
    })  # fmt: skip
    loop = asyncio.get_running_loop()
    inflight: list[asyncio.Future[None]] = []
    more = True
    while more:
        message = await receive()
        parser.write(message.get("body", b""))
        more = message.get("more_body", False)
        if upload.pending >= BLOCK or (not more and upload.pending):
            views, offset = upload.take()
            await asyncio.gather(*inflight)
            inflight = [
                loop.run_in_executor(None, upload.hash_block, views),
                loop.run_in_executor(None, upload.write_block, views, offset),
            ]
    parser.finalize()
    await asyncio.gather(*inflight)
    await loop.run_in_executor(None, os.fsync, upload.fd)
    os.close(upload.fd)
    body = f'{{"size": {upload.size}, "sha256": "{upload.digest.hexdigest()}"}}'.encode()
    await send({"type": "http.response.start", "status": 201, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
    ]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})
    upload.path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--folder", type=Path, required=True)
    args = parser.parse_args()
    keep_freed_buffers()  # as runyard's server does
    uvicorn.run(bare_app(args.folder), host="127.0.0.1", port=args.port, http="httptools", log_level="warning",
                access_log=False, lifespan="off")  # fmt: skip


if __name__ == "__main__":
    main()
