"""Serve the Studio's static files (package data) at ``/``, with strict security headers.

The Studio is plain ES modules and CSS: no inline script or style anywhere, so the
Content-Security-Policy allows only same-origin files, plus ``blob:`` images for artifact
previews. Every file is revalidated (``no-cache`` + ETag) so an upgrade is seen at once.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' blob: data:",
        "connect-src 'self'",
        "font-src 'self'",
        "manifest-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "object-src 'none'",
    ]
)

SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=(), payment=()"),
    (b"cache-control", b"no-cache"),
]


def studio_dir() -> Path:
    return Path(str(files("runyard") / "studio"))


class StudioFiles(StaticFiles):
    """StaticFiles that adds the Studio's security and caching headers to every answer."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in SECURITY_HEADERS}
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = {**message, "headers": headers + SECURITY_HEADERS}
            await send(message)

        await super().__call__(scope, receive, send_with_headers)


def mount_studio(app: FastAPI) -> None:
    app.mount("/", StudioFiles(directory=studio_dir(), html=True), name="studio")
