"""Streaming multipart uploads: the file goes to disk as it arrives, memory stays flat.

The body is fed chunk by chunk to python-multipart's streaming parser. Small fields
(``sessionId``, ``relativePath``) are kept in memory up to 64 KiB each; the ``file`` part
goes to an :class:`~runyard.agents.catalog.UploadSink` (a temp file in ``uploads/``) as views
of the received chunks, without a copy. Every 4 MiB the block is handed to two threads of the
upload's own: one hashes the blocks in order, the other writes them. Receiving runs one block
ahead of the hash and at most :data:`WRITE_DEPTH` blocks ahead of the disk, so a slow disk
holds the client back instead of filling memory, and a disk that stalls for a moment does not
stall the hash; beyond one block each, the uploads share :data:`WRITE_BUDGET` bytes waiting
for the disk. Past the upload limit the upload stops with :class:`UploadTooLarge` and the
temp file is removed: nothing is left behind.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from python_multipart.multipart import MultipartParser, parse_options_header

from runyard.agents.catalog import ReceivedUpload, UploadSink
from runyard.agents.errors import AgentError, AgentInvalid, BadRequest

FLUSH_BYTES = 4 << 20
WRITE_DEPTH = 8  # blocks handed to the writer and not yet written: about 32 MiB
# what all uploads together may hold for the disk beyond one block each: with many uploads
# to a slow disk, memory grows by this much, not by WRITE_DEPTH blocks an upload
WRITE_BUDGET = 64 << 20
MAX_FIELD_BYTES = 64 * 1024
MAX_PARTS = 8
MAX_BOUNDARY_BYTES = 70  # RFC 2046; the parser raises a bare error past 256
TEXT_FIELDS = ("sessionId", "relativePath")


@dataclass
class _Part:
    name: str = ""
    file_name: str | None = None
    content_type: str = ""
    headers: dict[str, bytes] = field(default_factory=dict)
    value: bytearray = field(default_factory=bytearray)


class _Receiver:
    """python-multipart callbacks that route each part to memory or to the sink."""

    def __init__(self, open_sink: Callable[[dict[str, str]], UploadSink]) -> None:
        self.open_sink = open_sink
        self.fields: dict[str, str] = {}
        self.sink: UploadSink | None = None
        # the file part began: its sink is opened (session check, temp file) off the event
        # loop after the chunk that began it; what arrived meanwhile waits here
        self.wants_sink = False
        self.early: list[memoryview] = []
        self.file_name = ""
        self.content_type = ""
        self.part = _Part()
        self.parts = 0
        self.ended = False  # the closing boundary was seen
        self._header_name = bytearray()
        self._header_value = bytearray()

    def callbacks(self) -> Any:
        return {
            "on_part_begin": self._part_begin,
            "on_header_field": lambda d, s, e: self._header_name.extend(d[s:e]),
            "on_header_value": lambda d, s, e: self._header_value.extend(d[s:e]),
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
            "on_part_end": self._part_end,
            "on_end": self._end,
        }

    def _part_begin(self) -> None:
        self.parts += 1
        if self.parts > MAX_PARTS:
            raise BadRequest(f"Too many form parts (at most {MAX_PARTS})")
        self.part = _Part()

    def _header_end(self) -> None:
        self.part.headers[bytes(self._header_name).lower().decode("latin-1")] = bytes(
            self._header_value
        )
        self._header_name.clear()
        self._header_value.clear()

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self.part.headers.get("content-disposition"))
        self.part.name = _utf8(options.get(b"name", b""), "form field name")
        if b"filename" in options:
            self.part.file_name = _utf8(options[b"filename"], "file name")
        self.part.content_type = self.part.headers.get("content-type", b"").decode("latin-1")
        if self.part.name == "file":
            if self.sink is not None or self.wants_sink:
                raise BadRequest("Send exactly one 'file' part per upload")
            self.file_name = self.part.file_name or ""
            self.content_type = self.part.content_type
            self.wants_sink = True
        elif self.part.name not in TEXT_FIELDS:
            raise BadRequest(
                f"Unexpected form field {self.part.name!r}; an upload has the fields "
                "sessionId, file and relativePath"
            )

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self.part.name == "file":
            if self.sink is None:
                self.early.append(memoryview(data)[start:end])
            else:
                self.sink.add(memoryview(data)[start:end])
            return
        self.part.value += data[start:end]
        if len(self.part.value) > MAX_FIELD_BYTES:
            limit = MAX_FIELD_BYTES
            raise BadRequest(f"Form field {self.part.name!r} is longer than {limit} bytes")

    async def open_pending_sink(self) -> None:
        """Open the file part's sink in a worker thread, then hand it what came early."""
        if not self.wants_sink:
            return
        self.wants_sink = False
        self.sink = await asyncio.to_thread(self.open_sink, dict(self.fields))
        early, self.early = self.early, []
        for view in early:
            self.sink.add(view)

    def _part_end(self) -> None:
        if self.part.name in TEXT_FIELDS:
            self.fields[self.part.name] = _utf8(bytes(self.part.value), self.part.name)

    def _end(self) -> None:
        self.ended = True


def _utf8(raw: bytes, what: str) -> str:
    """``raw`` as text; bytes that are not UTF-8 (an encoded lone surrogate among them) are
    a 422, as in a JSON body."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AgentInvalid(
            f"The {what} is not valid UTF-8 (byte {exc.start}); form fields must be "
            "Unicode text"
        ) from exc


def multipart_boundary(content_type: str | None) -> bytes:
    media, options = parse_options_header(content_type)
    if media != b"multipart/form-data" or not options.get(b"boundary"):
        raise BadRequest(
            "An upload is a multipart/form-data body with the fields sessionId, file and "
            "relativePath"
        )
    boundary: bytes = options[b"boundary"]
    if len(boundary) > MAX_BOUNDARY_BYTES:
        raise BadRequest(f"The multipart boundary is longer than {MAX_BOUNDARY_BYTES} bytes")
    return boundary


async def receive_upload(
    chunks: AsyncIterator[bytes],
    content_type: str | None,
    open_sink: Callable[[dict[str, str]], UploadSink],
) -> ReceivedUpload:
    """Parse a multipart body from ``chunks``; the file part streams into ``open_sink(...)``.

    ``open_sink`` gets the text fields seen so far (so it can refuse early, e.g. a closed
    session). While the blocks before it are hashed and written the next one is received,
    so at most ``WRITE_DEPTH + 1`` blocks are in memory. On any error the sink's temp file
    is removed before the error propagates.
    """
    receiver = _Receiver(open_sink)
    parser = MultipartParser(multipart_boundary(content_type), receiver.callbacks())
    writer = _BlockWriter()
    try:
        async for chunk in chunks:
            _feed(parser, chunk)
            await receiver.open_pending_sink()
            if receiver.sink is not None and receiver.sink.pending_bytes >= FLUSH_BYTES:
                await writer.hand_over(receiver.sink)
        parser.finalize()
        await receiver.open_pending_sink()
        if not receiver.ended:
            raise BadRequest(
                "The multipart body ended before its closing boundary: the upload is incomplete"
            )
        if receiver.sink is None:
            raise BadRequest("The upload has no 'file' part")
        await writer.drain()
        await asyncio.to_thread(receiver.sink.finish)
    except BaseException:
        await writer.drain(suppress=True)
        if receiver.sink is not None:
            receiver.sink.discard()
        raise
    return ReceivedUpload(receiver.fields, receiver.file_name, receiver.content_type, receiver.sink)


class _BlockWriter:
    """The blocks of one upload, hashed in order in one thread and written in order in another.

    A block is handed over once the previous one is hashed (the hash is the slower lane and
    sets the pace) and once fewer than :data:`WRITE_DEPTH` blocks of this upload, and fewer
    than :data:`WRITE_BUDGET` bytes of all uploads, wait for the disk; with none of its own
    waiting, an upload always goes on. The two threads start with the first block (a small
    upload never needs them) and end with :meth:`drain`.
    """

    waiting = 0  # bytes handed to the writers of all uploads and not yet written (the loop's)

    def __init__(self) -> None:
        self.lanes: tuple[ThreadPoolExecutor, ThreadPoolExecutor] | None = None
        self.hashing: asyncio.Future[None] | None = None
        self.writes: deque[asyncio.Future[None]] = deque()

    async def hand_over(self, sink: UploadSink) -> None:
        if self.hashing is not None:
            await self.hashing
        while self.writes and (
            len(self.writes) >= WRITE_DEPTH or _BlockWriter.waiting >= WRITE_BUDGET
        ):
            await self.writes.popleft()
        if self.lanes is None:
            self.lanes = (
                ThreadPoolExecutor(1, thread_name_prefix="upload-hash"),
                ThreadPoolExecutor(1, thread_name_prefix="upload-write"),
            )
        hash_lane, write_lane = self.lanes
        block = sink.take()
        loop = asyncio.get_running_loop()
        self.hashing = loop.run_in_executor(hash_lane, sink.hash_block, block)
        writing = loop.run_in_executor(write_lane, sink.write_block, block)
        _BlockWriter.waiting += block.size
        writing.add_done_callback(lambda _: _BlockWriter.written(block.size))
        self.writes.append(writing)

    @staticmethod
    def written(size: int) -> None:
        _BlockWriter.waiting -= size

    async def drain(self, suppress: bool = False) -> None:
        """Wait for every block handed over; the first error unless ``suppress``."""
        inflight = [*self.writes] if self.hashing is None else [self.hashing, *self.writes]
        self.hashing, self.writes = None, deque()
        outcomes = await asyncio.gather(*inflight, return_exceptions=True)
        if self.lanes is not None:
            for lane in self.lanes:
                lane.shutdown(wait=False)  # idle: every job it had is done
            self.lanes = None
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not suppress:
                raise outcome


def _feed(parser: MultipartParser, chunk: bytes) -> None:
    if type(chunk) is not bytes:  # the sink keeps views of what it is fed: they must not change
        chunk = bytes(chunk)
    try:
        parser.write(chunk)
    except AgentError:
        raise
    except Exception as exc:
        raise BadRequest(f"Malformed multipart body: {exc}") from exc
