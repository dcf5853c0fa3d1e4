"""File downloads that a browser will never render on the server's own origin, streamed
from a descriptor opened once.

Task outputs, run outputs and uploads are untrusted: an HTML or SVG file opened directly
must not run script next to the Studio. Every download is an attachment, not sniffed,
and sandboxed by its Content-Security-Policy.

The file arrives already opened (:func:`runyard.workspace.safefs.open_under`): the
response reads only from that descriptor, so a name swapped for a symlink after the
checks changes nothing. Length and modification time come from the same ``fstat``.
A single byte range (``Range: bytes=a-b``, what the Studio's previews ask for) answers
206; several ranges answer the whole file.
"""

from __future__ import annotations

import mimetypes
import os
from email.utils import formatdate
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from runyard.workspace.filenames import shown_name
from runyard.workspace.safefs import OpenedFile

CHUNK = 256 * 1024
UNSATISFIABLE = (-1, -1)
TEXT_SUFFIXES = {".log", ".jsonl", ".md", ".csv", ".tsv", ".yaml", ".yml", ".txt", ".py"}
SAFE_HEADERS = {
    "x-content-type-options": "nosniff",
    "content-security-policy": "sandbox; default-src 'none'",
    "cache-control": "no-store",
}


def media_type_of(name: str) -> str:
    media = mimetypes.guess_type(name)[0]
    if media is None and os.path.splitext(name)[1] in TEXT_SUFFIXES:
        media = "text/plain; charset=utf-8"
    return media or "application/octet-stream"


def content_disposition(filename: str) -> str:
    quoted = quote(filename)
    if quoted != filename:
        return f"attachment; filename*=utf-8''{quoted}"
    return f'attachment; filename="{filename}"'


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """``(start, end)`` inclusive for one range; None to answer the whole file (several
    ranges, or a header we do not read); :data:`UNSATISFIABLE` when no byte is in range.
    """
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash or not (first or last) or not (first + last).isdigit():
        return None
    if not first:  # the last N bytes
        suffix = int(last)
        return (max(size - suffix, 0), size - 1) if suffix and size else UNSATISFIABLE
    start = int(first)
    if start >= size or (last and int(last) < start):
        return UNSATISFIABLE
    return start, min(int(last), size - 1) if last else size - 1


class DescriptorResponse(Response):
    """Streams an :class:`OpenedFile` as an attachment and closes it when done."""

    def __init__(self, opened: OpenedFile, filename: str, media_type: str) -> None:
        self.opened = opened
        self.filename = filename
        self.status_code = 200
        self.media_type = media_type
        self.background = None
        headers = {
            **SAFE_HEADERS,
            "content-disposition": content_disposition(filename),
            "accept-ranges": "bytes",
            "last-modified": formatdate(opened.info.st_mtime, usegmt=True),
        }
        self.init_headers(headers)  # adds content-type (with a charset for text/*)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            start, end = self._choose_range(scope)
            await send(
                {"type": "http.response.start", "status": self.status_code,
                 "headers": self.raw_headers}
            )  # fmt: skip
            if scope.get("method") != "HEAD" and self.status_code != 416:
                await self._send_body(send, start, end)
        finally:
            self.opened.close()

    def _choose_range(self, scope: Scope) -> tuple[int, int]:
        size = self.opened.size
        header = next((v for k, v in scope.get("headers", ()) if k == b"range"), b"")
        chosen = parse_range(header.decode("latin-1"), size) if header else None
        if chosen == UNSATISFIABLE:
            self.status_code = 416
            self.headers["content-range"] = f"bytes */{size}"
            self.headers["content-length"] = "0"
            return 0, -1
        if chosen is None:
            self.headers["content-length"] = str(size)
            return 0, size - 1
        start, end = chosen
        self.status_code = 206
        self.headers["content-range"] = f"bytes {start}-{end}/{size}"
        self.headers["content-length"] = str(end - start + 1)
        return start, end

    async def _send_body(self, send: Send, start: int, end: int) -> None:
        offset = start
        while offset <= end:
            want = min(CHUNK, end + 1 - offset)
            chunk = await run_in_threadpool(os.pread, self.opened.fd, want, offset)
            offset += len(chunk)
            last = not chunk or offset > end
            # a file cut short after the fstat ends the body early; the server then drops
            # the connection because the promised length was not sent
            await send({"type": "http.response.body", "body": chunk, "more_body": not last})
            if last:
                return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def download(
    opened: OpenedFile, filename: str | None = None, media_type: str | None = None
) -> DescriptorResponse:
    """The response for an opened file; it owns the descriptor from here on."""
    name = shown_name(filename or opened.name)  # a header is text: the name as listed
    return DescriptorResponse(opened, name, media_type or media_type_of(name))
