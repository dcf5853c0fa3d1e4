"""``runyard mcp`` relaying stdio to a running server's ``/mcp``, never left waiting.

The server's MCP endpoint is stateless and answers each message in the body of its own
POST (api/mcp/server.py), so the relay is one POST per message, each request in a task of
its own (a ``wait_task`` may take hours, and answers may come back in any order). Two
promises the SDK's client transport does not keep:

* **stdin closing ends it.** Pending calls are dropped (nobody is left to read them), the
  stdout writer is closed, and the process exits at once.
* **every request gets an answer.** A POST that fails (the server died: refused, reset,
  no connection within :data:`CONNECT_SECONDS`) answers its request with a JSON-RPC error
  naming the server. While calls are pending, ``/health`` is asked every
  :data:`PROBE_SECONDS`; a server that cannot be reached or does not answer within
  :data:`CONNECT_SECONDS` fails them all the same way (a stopped or wedged server keeps
  their connections open without a word).

>>> asyncio.run(relay("http://127.0.0.1:8765", token))
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import httpx
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from runyard.api.mcp.server import MCP_PATH

log = logging.getLogger("runyard.api.mcp")

CONNECT_SECONDS = 10.0  # connect, write and /health; reads of calls are unbounded (wait_task)
PROBE_SECONDS = 5.0
VERSION_HEADER = "mcp-protocol-version"
ACCEPT = "application/json, text/event-stream"


class RelayError(Exception):
    """The server gave no usable answer to a relayed request."""


async def relay(url: str, token: str | None) -> None:
    """Pipe stdio to ``<url>/mcp`` until stdin closes (see the module docstring)."""
    headers = {"accept": ACCEPT}
    if token:
        headers["authorization"] = f"Bearer {token}"
    timeout = httpx.Timeout(CONNECT_SECONDS, read=None)
    async with (
        httpx.AsyncClient(headers=headers, timeout=timeout) as http,
        stdio_server() as (local_in, local_out),
    ):
        link = _Link(http, url.rstrip("/"), local_out)
        async with anyio.create_task_group() as group:
            group.start_soon(link.watch)
            async for message in local_in:
                if isinstance(message, Exception):
                    log.warning("dropped an unreadable message from the client: %s", message)
                else:
                    group.start_soon(link.forward, message.message)
            group.cancel_scope.cancel()  # stdin closed: nobody is left to read the answers
        await local_out.aclose()  # ends stdio_server's writer, so its exit does not wait


class _Link:
    """The relay's side of one server: POSTs messages, answers every request once."""

    def __init__(self, http: httpx.AsyncClient, url: str, out: Any) -> None:
        self.http = http
        self.url = url
        self.out = out
        self.version: str | None = None  # the protocol version initialize agreed on
        self.pending: dict[types.RequestId, anyio.CancelScope] = {}
        self.down = ""  # why the watch gave up on the server, once it has

    async def forward(self, message: types.JSONRPCMessage) -> None:
        if not isinstance(message, types.JSONRPCRequest):
            try:
                await self._post(message)
            except RelayError as exc:
                log.warning("a %s was not relayed: %s", type(message).__name__, exc)
            return
        await self._call(message)

    async def _call(self, request: types.JSONRPCRequest) -> None:
        scope = anyio.CancelScope()
        self.pending[request.id] = scope
        try:
            with scope:
                answers = await self._post(request)
            if scope.cancelled_caught:
                raise RelayError(self.down)
        except RelayError as exc:
            answers = [_error(request.id, str(exc))]
        finally:
            self.pending.pop(request.id, None)
        if not any(getattr(answer, "id", None) == request.id for answer in answers):
            answers.append(_error(request.id, f"the runyard server answered no {request.method}"))
        for answer in answers:
            await self.out.send(SessionMessage(answer))

    async def _post(self, message: types.JSONRPCMessage) -> list[types.JSONRPCMessage]:
        body = message.model_dump(by_alias=True, mode="json", exclude_unset=True)
        headers = {VERSION_HEADER: self.version} if self.version else {}
        try:
            reply = await self.http.post(self.url + MCP_PATH, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise RelayError(f"the runyard server at {self.url} did not answer ({exc!r})") from exc
        if reply.status_code == 202:
            return []
        answers = _messages(reply)
        self._note_version(answers)
        return answers

    def _note_version(self, answers: list[types.JSONRPCMessage]) -> None:
        for answer in answers:
            if isinstance(answer, types.JSONRPCResponse) and "protocolVersion" in answer.result:
                self.version = str(answer.result["protocolVersion"])

    async def watch(self) -> None:
        """Fail the pending calls once the server stops answering ``/health``."""
        while True:
            await anyio.sleep(PROBE_SECONDS)
            if self.pending and not await self._answers():
                for scope in list(self.pending.values()):
                    scope.cancel()

    async def _answers(self) -> bool:
        try:
            with anyio.fail_after(CONNECT_SECONDS):
                await self.http.get(self.url + "/health")
        except (httpx.HTTPError, TimeoutError) as exc:
            self.down = f"the runyard server at {self.url} stopped answering ({exc!r})"
            return False
        return True


def _messages(reply: httpx.Response) -> list[types.JSONRPCMessage]:
    """The JSON-RPC messages a POST answered, or a RelayError saying what came instead."""
    try:
        data = reply.json()
        items = data if isinstance(data, list) else [data]
        return [types.jsonrpc_message_adapter.validate_python(item) for item in items]
    except (ValueError, ValidationError) as exc:
        raise RelayError(
            f"the runyard server at {reply.request.url} answered HTTP {reply.status_code}: "
            f"{reply.text[:300]}"
        ) from exc


def _error(request_id: types.RequestId, message: str) -> types.JSONRPCError:
    error = types.ErrorData(code=types.INTERNAL_ERROR, message=message)
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error)
