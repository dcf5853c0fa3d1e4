"""Request paths that cannot name anything answer 404 before any route sees them.

Every path parameter of runyard ends up as a file name (task ids, run and session ids,
artifact ids, file paths under a task or run folder). Linux refuses a name over 255
bytes (``NAME_MAX``) or a path over 4096 (``PATH_MAX``) with ``ENAMETOOLONG``, which a
route would turn into a 500; no record or file can have such a name, so the honest
answer is "not found", and it is given here, once, for every route — present and
future. The answer keeps each API's error shape: ``{"error": {"code", "message"}}``
under ``/api/``, ``{"detail": ...}`` elsewhere. The message does not repeat the path.

>>> app = PathLimits(app)
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

MAX_SEGMENT_BYTES = 255
MAX_PATH_BYTES = 4096


def path_problem(path: str) -> str | None:
    """Why ``path`` (as routed: percent-decoded) cannot name anything, or None."""
    raw = path.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_PATH_BYTES:
        return f"the path is longer than {MAX_PATH_BYTES} bytes"
    if len(raw) > MAX_SEGMENT_BYTES and any(
        len(segment) > MAX_SEGMENT_BYTES for segment in raw.split(b"/")
    ):
        return f"a path segment is longer than {MAX_SEGMENT_BYTES} bytes"
    return None


class PathLimits:
    """Pure ASGI middleware: 404 for paths no file or record can have (see the module)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        problem = path_problem(scope["path"]) if scope["type"] == "http" else None
        if problem is None:
            await self.app(scope, receive, send)
            return
        await _not_found(scope["path"].startswith("/api/"), f"Not found: {problem}", send)


async def _not_found(agent_shape: bool, message: str, send: Send) -> None:
    payload = {"error": {"code": "not_found", "message": message}} if agent_shape else None
    body = json.dumps(payload or {"detail": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 404,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
