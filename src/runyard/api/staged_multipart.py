"""The multipart form of AxonX's ``POST /files``: one ``file`` part, and optionally a
``directory`` field before it, streamed into the staging area as a raw body is
(:class:`runyard.workspace.staging_area.StagedUpload`), never held in memory.

As in AxonX, the ``x-file-name`` and ``x-file-directory`` headers win over the part's
file name and the ``directory`` field; the body may be the file's limit plus 64 KiB of
framing. Refused with nothing kept (422): another field, a field twice, a second file, a
``directory`` after the file (its bytes are already being written where the headers and
the fields before them said), a field longer than 64 KiB or not UTF-8, a malformed or
unfinished body, or no file at all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.concurrency import run_in_threadpool

from runyard.errors import StagedFileRefused
from runyard.workspace.staging_area import StagedFile, StagedUpload, too_large

OVERHEAD_BYTES = 64 * 1024  # AxonX's MULTIPART_OVERHEAD_BYTES
MAX_FIELD_BYTES = 64 * 1024
FIELDS = ("file", "directory")


def boundary_of(content_type: str) -> bytes:
    _, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if not boundary or len(boundary) > 70:
        raise StagedFileRefused("A multipart upload needs a boundary of 1-70 characters")
    return bytes(boundary)


class _Form:
    """python-multipart callbacks: the ``directory`` field kept, the file's bytes queued."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.name = ""
        self.file_name = ""
        self.directory: str | None = None
        self.value = bytearray()
        self.headers: dict[str, bytes] = {}
        self.header = (bytearray(), bytearray())
        self.file_begun = False
        self.pending: list[bytes] = []
        self.ended = False

    def callbacks(self) -> Any:  # python-multipart's MultipartCallbacks
        return {
            "on_part_begin": self._part_begin,
            "on_header_field": lambda d, s, e: self.header[0].extend(d[s:e]),
            "on_header_value": lambda d, s, e: self.header[1].extend(d[s:e]),
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
            "on_part_end": self._part_end,
            "on_end": self._end,
        }

    def _part_begin(self) -> None:
        self.headers, self.value = {}, bytearray()

    def _header_end(self) -> None:
        name, value = self.header
        self.headers[bytes(name).lower().decode("latin-1")] = bytes(value)
        name.clear()
        value.clear()

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self.headers.get("content-disposition", b""))
        self.name = _text(options.get(b"name", b""), "a field name")
        if self.name not in FIELDS:
            raise StagedFileRefused("Only 'file' and 'directory' multipart fields are supported")
        if self.name in self.seen:
            raise StagedFileRefused("Duplicate multipart fields are not supported")
        if self.name == "directory" and "file" in self.seen:
            raise StagedFileRefused("The 'directory' field must come before the 'file' part")
        self.seen.append(self.name)
        if self.name == "file":
            self.file_name = _text(options.get(b"filename", b""), "the file name")
            self.file_begun = True

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self.name == "file":
            self.pending.append(bytes(data[start:end]))
            return
        self.value += data[start:end]
        if len(self.value) > MAX_FIELD_BYTES:
            raise StagedFileRefused(f"The {self.name!r} field is longer than {MAX_FIELD_BYTES}")

    def _part_end(self) -> None:
        if self.name == "directory":
            self.directory = _text(bytes(self.value), "the directory").strip() or None

    def _end(self) -> None:
        self.ended = True

    def take(self) -> bytes:
        block = b"".join(self.pending)
        self.pending.clear()
        return block


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StagedFileRefused(f"{what} is not UTF-8 text") from exc


def _feed(parser: MultipartParser, chunk: bytes | None) -> None:
    """Parse ``chunk`` (None: the body's end)."""
    try:
        parser.write(chunk) if chunk is not None else parser.finalize()
    except StagedFileRefused:
        raise
    except Exception as exc:  # python-multipart's own errors: the body is malformed
        raise StagedFileRefused(f"Malformed multipart body: {exc}") from exc


async def stage_multipart(
    chunks: AsyncIterator[bytes],
    content_type: str,
    root: Path,
    headers: tuple[str, str | None],
    limit: int,
) -> StagedFile:
    """Stage the ``file`` part of a multipart body; ``headers``: ``x-file-name`` and
    ``x-file-directory`` as sent ("" and None when not)."""
    form = _Form()
    parser = MultipartParser(boundary_of(content_type), form.callbacks())
    upload: StagedUpload | None = None
    received = 0
    try:
        async for chunk in chunks:
            received += len(chunk)
            if received > limit + OVERHEAD_BYTES:
                raise too_large(limit)
            _feed(parser, chunk)
            if form.file_begun and upload is None:
                name, directory = headers[0] or form.file_name, headers[1] or form.directory
                upload = await run_in_threadpool(StagedUpload.begin, root, name, directory, limit)
            if upload is not None and form.pending:
                await run_in_threadpool(upload.write, form.take())
        _feed(parser, None)
        if upload is None:
            raise StagedFileRefused("Multipart upload requires one file field named 'file'")
        if not form.ended:
            raise StagedFileRefused("Incomplete multipart body: no closing boundary")
        return await run_in_threadpool(upload.commit)
    finally:
        if upload is not None:
            await run_in_threadpool(upload.close)
