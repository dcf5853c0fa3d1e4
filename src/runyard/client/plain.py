"""Plain ``http://`` over the standard library's ``http.client``: the reads ``runyard ls``
makes of a server (its health, pages of the task list), answered as plain JSON, and the
Job API calls of :class:`runyard.client.Client` (:class:`KeptConnections`). A command typed
many times a day pays for neither httpx nor the record models, and a job call costs the
client about a quarter of the CPU it costs through httpx.

>>> lister = PlainClient("http://127.0.0.1:8765", token)
>>> items, next_cursor, total = lister.task_page(limit=50)

It says what :class:`runyard.client.Client` says: the same headers, the same errors for an
HTTP status (:mod:`runyard.client.answers`) and a lost connection
(:class:`~runyard.errors.ServerUnreachable` with the same reasons). It speaks plain
``http://`` without a proxy; :func:`plain_reaches` says when that is all it takes, else
httpx (its TLS and proxy handling) carries the requests.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import threading
from typing import Any
from urllib.parse import urlencode, urlsplit

from runyard.client.answers import (
    TASK_LIST,
    auth_headers,
    checked_json,
    os_reason,
    task_list_body,
    task_list_params,
)
from runyard.errors import ServerUnreachable

CONNECT_TIMEOUT = 10.0  # as the Client's
PROXY_VARIABLES = ("http_proxy", "all_proxy")


def plain_reaches(url: str) -> bool:
    """Whether ``url`` is reached without TLS and without a proxy from the environment
    (and is well formed: the Client says what is wrong with one that is not)."""
    try:
        parts = urlsplit(url)
        plain_http = parts.scheme == "http" and bool(parts.hostname) and (parts.port or 80) > 0
    except ValueError:  # a port that is not a number
        return False
    if not plain_http:
        return False
    return not any(key.lower() in PROXY_VARIABLES and value for key, value in os.environ.items())


class PlainReply:
    """An answer read whole: its status and its body."""

    def __init__(self, status_code: int, content: bytes) -> None:
        self.status_code = status_code
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class NoAnswer(Exception):
    """A request that got no answer: why, in a few words, and whether its time ran out."""

    def __init__(self, reason: str, *, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.timed_out = timed_out


class KeptConnections:
    """Keep-alive connections to the plain-``http://`` server at ``url``, shared by threads.

    A request takes an idle connection, or opens one (in at most :data:`CONNECT_TIMEOUT`),
    and gives it back once its answer is read whole. An idle connection the server closed
    meanwhile (its keep-alive timeout, a restart) is readable, and is dropped before it is
    used, as httpcore does; a connection whose request failed, timed out or was answered
    with ``Connection: close`` is never used again. With ``keep=False`` every connection
    closes after its answer (a command's one or two reads leave nothing open). A request
    that gets no answer raises :class:`NoAnswer`: nothing is sent again here, that is the
    caller's to decide."""

    def __init__(self, url: str, headers: dict[str, str], *, keep: bool = True) -> None:
        parts = urlsplit(url)
        self._host = parts.hostname or ""
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._headers = headers
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._keep = keep
        self._closed = False

    def request(
        self, method: str, target: str, body: bytes | None = None,
        headers: dict[str, str] | None = None, *, timeout: float | None,
    ) -> PlainReply:  # fmt: skip
        """The answer to ``method target`` (``timeout``: seconds each read may take, None
        for no bound)."""
        connection = self._take()
        try:
            connection.sock.settimeout(timeout)
            connection.request(
                method, self._prefix + target, body, {**self._headers, **(headers or {})}
            )
            answer = connection.getresponse()
            reply = PlainReply(answer.status, answer.read())
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise no_answer(exc, "the connection broke off") from exc
        except BaseException:
            connection.close()
            raise
        if answer.will_close:
            connection.close()
        else:
            self._give(connection)
        return reply

    def close(self) -> None:
        """Close the idle connections; those in use close when their answer is read."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def _take(self) -> http.client.HTTPConnection:
        while True:
            with self._lock:
                if self._closed:
                    raise RuntimeError("the client is closed")
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._open()
            if _still_open(connection.sock):
                return connection
            connection.close()

    def _open(self) -> http.client.HTTPConnection:
        connection = http.client.HTTPConnection(self._host, self._port, timeout=CONNECT_TIMEOUT)
        try:
            connection.connect()
        except OSError as exc:
            connection.close()
            raise no_answer(exc, "could not connect") from exc
        return connection  # with TCP_NODELAY, as http.client sets it

    def _give(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if self._keep and not self._closed:
                self._idle.append(connection)
                return
        connection.close()


def _still_open(sock: socket.socket | None) -> bool:
    """Whether an idle connection may carry a request: nothing is due on it, so a readable
    one was closed by the server (or sent what nobody asked for)."""
    if sock is None:
        return False
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return not poller.poll(0)


def no_answer(exc: BaseException, otherwise: str) -> NoAnswer:
    if isinstance(exc, socket.timeout):
        return NoAnswer("no answer in time", timed_out=True)
    return NoAnswer(os_reason(exc) or otherwise)


class PlainClient:
    """Reads of one server at ``url`` (``http://`` only); ``timeout`` bounds each answer
    (``None``: no bound), connecting takes at most :data:`CONNECT_TIMEOUT`."""

    def __init__(self, url: str, token: str | None, timeout: float | None = None) -> None:
        self.url = url.rstrip("/")
        headers = {"accept": "application/json", **auth_headers(token)}
        self._connections = KeptConnections(self.url, headers, keep=False)
        self._timeout = timeout

    def health(self) -> bool:
        """True when the server answers its health check."""
        try:
            return self._get("/health").status_code == 200
        except ServerUnreachable:
            return False

    def task_page(
        self, *, limit: int, cursor: str | None = None, state: str | None = None,
        task_type: str | None = None, text: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None, int]:  # fmt: skip
        """One page of ``GET /api/v1/tasks`` in its default order (newest first): the
        statuses as the server sent them, the cursor of the next page, and the total."""
        query = task_list_params(
            limit=limit, cursor=cursor, state=state, task_type=task_type, text=text
        )
        return task_list_body(checked_json(self._get(f"{TASK_LIST}?{urlencode(query)}")))

    def _get(self, target: str) -> PlainReply:
        try:
            return self._connections.request("GET", target, timeout=self._timeout)
        except NoAnswer as exc:
            raise ServerUnreachable(self.url, exc.reason) from exc
