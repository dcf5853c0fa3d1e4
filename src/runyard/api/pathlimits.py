"""Request paths that cannot name anything answer 404 before any route sees them.

Every path parameter of runyard ends up as a file name (task ids, run and session ids,
artifact ids, file paths under a task or run folder). Linux refuses a name over 255
bytes (``NAME_MAX``) or a path over 4096 (``PATH_MAX``) with ``ENAMETOOLONG``, which a
route would turn into a 500; no record or file can have such a name, so the honest
answer is "not found", and it is given here, once, for every route — present and
future, as :class:`~runyard.errors.UnnameablePath` through the error table (which keeps
each API's error shape). The message does not repeat the path.

>>> app = PathLimits(app)
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from runyard.api.errormap import render
from runyard.errors import UnnameablePath

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
        await render(UnnameablePath(f"Not found: {problem}"), scope["path"])(scope, receive, send)
