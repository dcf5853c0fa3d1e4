"""Forward a Job API call to a configured remote runyard (the envelope's ``target``).

Its refusals are family errors (:class:`~runyard.errors.UnknownTarget`,
:class:`~runyard.errors.UpstreamError`) that the error table answers (422, 502)."""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.responses import JSONResponse, Response, StreamingResponse

from runyard.api.jsonbody import MAX_DEPTH, parse_json_body
from runyard.config import Settings, Target
from runyard.errors import UnknownTarget, UpstreamError
from runyard.tls import client_verify

CONNECT_TIMEOUT = 5.0


def resolve_target(settings: Settings, name: str) -> Target:
    try:
        return settings.targets[name]
    except KeyError:
        known = ", ".join(sorted(settings.targets)) or "none configured"
        raise UnknownTarget(f"Unknown target {name!r}. Configured targets: {known}") from None


def _client(target: Target) -> httpx.AsyncClient:
    """A client for one forwarded call (closed with it)."""
    headers = {"authorization": f"Bearer {target.token}"} if target.token else {}
    timeout = httpx.Timeout(None, connect=CONNECT_TIMEOUT)
    url = target.url.rstrip("/")
    return httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout, verify=_verify(url))


def _verify(url: str) -> ssl.SSLContext | bool:
    """The TLS context of a call to ``url``: for https, httpx's verifying one, made once
    for the server's life (making it is 16 ms of CPU, on the event loop, that every
    forwarded call paid); the forwarded calls all run on the event loop's one thread, so
    they never touch it at the same time."""
    verify = client_verify(url)
    return _verifying() if verify is True else verify


@functools.cache
def _verifying() -> ssl.SSLContext:
    return httpx.create_ssl_context()


async def forward_call(target: Target, name: str, arguments: dict[str, Any]) -> Response:
    try:
        async with _client(target) as client:
            reply = await client.post(f"/jobs/{name}", json={"arguments": arguments})
    except httpx.HTTPError as exc:
        raise UpstreamError(f"Target {target.url} unreachable: {exc!r}") from exc
    try:
        # a remote's answer is input like any other; it may wrap arguments nested to the limit
        body = parse_json_body(reply.content, max_depth=2 * MAX_DEPTH)
    except ValueError as exc:
        raise UpstreamError(f"Target {target.url} answered no usable JSON: {exc}") from exc
    return JSONResponse(body, status_code=reply.status_code)


async def forward_stream(
    target: Target, name: str, arguments: dict[str, Any], last_event_id: str | None
) -> Response:
    client = _client(target)
    headers = {"last-event-id": last_event_id} if last_event_id else {}
    request = client.build_request(
        "POST", f"/jobs/{name}/events", json={"arguments": arguments}, headers=headers
    )
    try:
        reply = await client.send(request, stream=True)
    except httpx.HTTPError as exc:
        await client.aclose()
        raise UpstreamError(f"Target {target.url} unreachable: {exc!r}") from exc
    if reply.status_code != 200:
        body = await reply.aread()
        await reply.aclose()
        await client.aclose()
        return Response(
            body, status_code=reply.status_code, media_type=reply.headers.get("content-type")
        )

    async def relay() -> AsyncIterator[bytes]:
        try:
            async for chunk in reply.aiter_raw():
                yield chunk
        finally:
            await reply.aclose()
            await client.aclose()

    return StreamingResponse(relay(), media_type="text/event-stream")
