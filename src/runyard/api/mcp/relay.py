"""``runyard mcp`` relaying stdio to a running server's ``/mcp``, never left waiting.

The server's MCP endpoint is stateless and answers each message in the body of its own
POST (api/mcp/server.py), so the relay is one POST per message, each request in a task of
its own (a ``wait_task`` may take hours, and answers may come back in any order). Two
promises the SDK's client transport does not keep:

* **stdin closing ends it.** Pending calls are dropped (nobody is left to read them), the
  stdout writer is closed, and the process exits at once.
* **every request gets an answer.** A POST that fails (the server died: refused, reset,
  no connection within ``connect_seconds``, 10 by default) answers its request with a JSON-RPC error
  naming the server. While calls are pending, ``/health`` is asked every
  ``probe_seconds`` (5); a server that cannot be reached or does not answer within
  ``connect_seconds`` fails them all the same way (a stopped or wedged server keeps
  their connections open without a word).

It speaks JSON-RPC lines on stdio itself and loads neither the MCP SDK nor its models
(about 0.7 s of imports): messages pass through as JSON, so the relay starts in the time
Python, anyio and httpx take. Only stdout's copy of fd 1 carries the wire; fd 1 itself
points at stderr while it runs, so nothing stray can corrupt it.

>>> asyncio.run(relay("http://127.0.0.1:8765", token))
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import IO, Any

import anyio
import httpx

from runyard.api.mcp import MCP_PATH

log = logging.getLogger("runyard.api.mcp")

CONNECT_SECONDS = 10.0  # connect, write and /health; reads of calls are unbounded (wait_task)
PROBE_SECONDS = 5.0
VERSION_HEADER = "mcp-protocol-version"
ACCEPT = "application/json, text/event-stream"
INTERNAL_ERROR = -32603  # JSON-RPC's code for an error of the server side

Message = dict[str, Any]


class RelayError(Exception):
    """The server gave no usable answer to a relayed request."""


async def relay(
    url: str,
    token: str | None,
    probe_seconds: float = PROBE_SECONDS,
    connect_seconds: float = CONNECT_SECONDS,
) -> None:
    """Pipe stdio to ``<url>/mcp`` until stdin closes (see the module docstring)."""
    headers = {"accept": ACCEPT}
    if token:
        headers["authorization"] = f"Bearer {token}"
    timeout = httpx.Timeout(connect_seconds, read=None)
    with wire_streams() as (wire_in, wire_out):
        async with (
            httpx.AsyncClient(headers=headers, timeout=timeout) as http,
            LineWriter.over(wire_out) as out,
        ):
            link = _Link(http, url.rstrip("/"), out, probe_seconds, connect_seconds)
            async with anyio.create_task_group() as group:
                group.start_soon(link.watch)
                async for message in read_messages(wire_in):
                    group.start_soon(link.forward, message)
                group.cancel_scope.cancel()  # stdin closed: nobody is left to read answers


@contextmanager
def wire_streams() -> Iterator[tuple[IO[bytes], IO[bytes]]]:
    """Private copies of fds 0 and 1 for the wire; meanwhile fd 0 reads nothing and fd 1
    writes to stderr, so stray output misses the wire. Both are put back at the end."""
    sys.stdout.flush()
    saved = {fd: os.dup(fd) for fd in (0, 1)}
    wire_in = os.fdopen(os.dup(0), "rb")
    wire_out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
        yield wire_in, wire_out
    finally:
        os.close(null)
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        wire_in.close()
        wire_out.close()


async def read_messages(wire_in: IO[bytes]) -> AsyncIterator[Message]:
    """The JSON-RPC messages of the client, one a line, until stdin closes; a line that is
    not one is logged and dropped (as the SDK's stdio transport does)."""
    lines = anyio.wrap_file(wire_in)
    async for line in lines:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError as exc:
            log.warning("dropped an unreadable message from the client: %s", exc)
            continue
        if not is_message(message):
            log.warning("dropped a message that is not JSON-RPC 2.0: %.200s", line)
            continue
        yield message


def is_message(value: Any) -> bool:
    return isinstance(value, dict) and value.get("jsonrpc") == "2.0"


class LineWriter:
    """Writes messages to the wire, one JSON line each, never two at once."""

    def __init__(self, wire: anyio.AsyncFile[bytes]) -> None:
        self._wire = wire
        self._lock = anyio.Lock()

    @classmethod
    @asynccontextmanager
    async def over(cls, wire_out: IO[bytes]) -> AsyncIterator[LineWriter]:
        yield cls(anyio.wrap_file(wire_out))

    async def send(self, message: Message) -> None:
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n"
        async with self._lock:
            await self._wire.write(line.encode("utf-8"))
            await self._wire.flush()


class _Link:
    """The relay's side of one server: POSTs messages, answers every request once."""

    def __init__(
        self, http: httpx.AsyncClient, url: str, out: LineWriter, probe: float, connect: float
    ) -> None:
        self.http = http
        self.probe = probe
        self.connect = connect
        self.url = url
        self.out = out
        self.version: str | None = None  # the protocol version initialize agreed on
        self.pending: dict[Any, anyio.CancelScope] = {}
        self.down = ""  # why the watch gave up on the server, once it has

    async def forward(self, message: Message) -> None:
        if "method" not in message or "id" not in message:  # a notification or an answer
            try:
                await self._post(message)
            except RelayError as exc:
                log.warning("a message was not relayed: %s", exc)
            return
        await self._call(message)

    async def _call(self, request: Message) -> None:
        request_id = request["id"]
        scope = anyio.CancelScope()
        self.pending[_key(request_id)] = scope
        try:
            with scope:
                answers = await self._post(request)
            if scope.cancelled_caught:
                raise RelayError(self.down)
        except RelayError as exc:
            answers = [_error(request_id, str(exc))]
        finally:
            self.pending.pop(_key(request_id), None)
        if not any(answer.get("id") == request_id for answer in answers):
            method = request.get("method")
            answers.append(_error(request_id, f"the runyard server answered no {method}"))
        for answer in answers:
            await self.out.send(answer)

    async def _post(self, message: Message) -> list[Message]:
        headers = {VERSION_HEADER: self.version} if self.version else {}
        try:
            reply = await self.http.post(self.url + MCP_PATH, json=message, headers=headers)
        except httpx.HTTPError as exc:
            raise RelayError(f"the runyard server at {self.url} did not answer ({exc!r})") from exc
        if reply.status_code == 202:
            return []
        answers = _messages(reply)
        self._note_version(answers)
        return answers

    def _note_version(self, answers: list[Message]) -> None:
        for answer in answers:
            result = answer.get("result")
            if isinstance(result, dict) and "protocolVersion" in result:
                self.version = str(result["protocolVersion"])

    async def watch(self) -> None:
        """Fail the pending calls once the server stops answering ``/health``."""
        while True:
            await anyio.sleep(self.probe)
            if self.pending and not await self._answers():
                for scope in list(self.pending.values()):
                    scope.cancel()

    async def _answers(self) -> bool:
        try:
            with anyio.fail_after(self.connect):
                await self.http.get(self.url + "/health")
        except (httpx.HTTPError, TimeoutError) as exc:
            self.down = f"the runyard server at {self.url} stopped answering ({exc!r})"
            return False
        return True


def _key(request_id: Any) -> str:
    """A request id as a dict key: ids are strings or numbers, and 1 is not "1"."""
    return json.dumps(request_id)


def _messages(reply: httpx.Response) -> list[Message]:
    """The JSON-RPC messages a POST answered, or a RelayError saying what came instead."""
    try:
        data = reply.json()
    except ValueError:
        data = None
    items = data if isinstance(data, list) else [data]
    if not items or not all(is_message(item) for item in items):
        raise RelayError(
            f"the runyard server at {reply.request.url} answered HTTP {reply.status_code}: "
            f"{reply.text[:300]}"
        )
    return items


def _error(request_id: Any, message: str) -> Message:
    error = {"code": INTERNAL_ERROR, "message": message}
    return {"jsonrpc": "2.0", "id": request_id, "error": error}
