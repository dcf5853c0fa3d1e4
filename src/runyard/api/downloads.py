"""File downloads that a browser will never render on the server's own origin.

Task outputs, run outputs and uploads are untrusted: an HTML or SVG file opened directly
must not run script next to the Studio. Every download is an attachment, not sniffed,
and sandboxed by its Content-Security-Policy.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from starlette.responses import FileResponse

TEXT_SUFFIXES = {".log", ".jsonl", ".md", ".csv", ".tsv", ".yaml", ".yml", ".txt", ".py"}
SAFE_HEADERS = {
    "x-content-type-options": "nosniff",
    "content-security-policy": "sandbox; default-src 'none'",
    "cache-control": "no-store",
}


def media_type_of(path: Path) -> str:
    media = mimetypes.guess_type(path.name)[0]
    if media is None and path.suffix in TEXT_SUFFIXES:
        media = "text/plain; charset=utf-8"
    return media or "application/octet-stream"


def download(
    path: Path, filename: str | None = None, media_type: str | None = None
) -> FileResponse:
    return FileResponse(
        path,
        media_type=media_type or media_type_of(path),
        filename=filename or path.name,
        content_disposition_type="attachment",
        headers=SAFE_HEADERS,
    )
