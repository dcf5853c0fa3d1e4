"""The reads ``runyard ls`` makes of a server (its health, pages of the task list) over
the standard library's ``http.client``, answered as plain JSON: a command typed many times
a day pays for neither httpx nor the record models.

>>> lister = PlainClient("http://127.0.0.1:8765", token)
>>> items, next_cursor, total = lister.task_page(limit=50)

It says what :class:`runyard.client.Client` says: the same headers, the same errors for an
HTTP status (:mod:`runyard.client.answers`) and a lost connection
(:class:`~runyard.errors.ServerUnreachable` with the same reasons). It speaks plain
``http://`` without a proxy; :func:`plain_reaches` says when that is all it takes, else
the :class:`~runyard.client.Client` (its TLS and proxy handling) does the reads.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
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


class _Reply:
    def __init__(self, status_code: int, content: bytes) -> None:
        self.status_code = status_code
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class PlainClient:
    """Reads of one server at ``url`` (``http://`` only); ``timeout`` bounds each answer
    (``None``: no bound), connecting takes at most :data:`CONNECT_TIMEOUT`."""

    def __init__(self, url: str, token: str | None, timeout: float | None = None) -> None:
        self.url = url.rstrip("/")
        self._parts = urlsplit(self.url)
        self._headers = {"accept": "application/json", **auth_headers(token)}
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

    def _get(self, target: str) -> _Reply:
        port = self._parts.port
        connection = http.client.HTTPConnection(
            self._parts.hostname or "", port, timeout=CONNECT_TIMEOUT
        )
        try:
            try:
                connection.connect()
            except OSError as exc:
                raise self._unreachable(exc, "could not connect") from exc
            connection.sock.settimeout(self._timeout)
            try:
                connection.request("GET", self._parts.path + target, headers=self._headers)
                answer = connection.getresponse()
                return _Reply(answer.status, answer.read())
            except (OSError, http.client.HTTPException) as exc:
                raise self._unreachable(exc, "the connection broke off") from exc
        finally:
            connection.close()

    def _unreachable(self, exc: BaseException, otherwise: str) -> ServerUnreachable:
        if isinstance(exc, socket.timeout):
            return ServerUnreachable(self.url, "no answer in time")
        return ServerUnreachable(self.url, os_reason(exc) or otherwise)
