"""What the server's answers mean, on plain data: the error of an HTTP status, why a
connection failed, and the task list's query and page. Both HTTP transports (httpx in
the clients, :mod:`runyard.client.plain` for the CLI's light reads) use these, so the
rules are written once; the module loads nothing outside the standard library.
"""

from __future__ import annotations

from typing import Any, Protocol

from runyard.errors import (
    HTTPError,
    NotFound,
    PayloadTooLarge,
    RequestInvalid,
    Unauthorized,
)

STATUS_ERRORS = {401: Unauthorized, 404: NotFound, 413: PayloadTooLarge, 422: RequestInvalid}
TASK_LIST = "/api/v1/tasks"
TASK_LIST_MAX = 1000  # the largest page the task list route gives


class Reply(Protocol):
    """An HTTP answer as both transports give it (an ``httpx.Response`` is one)."""

    @property
    def status_code(self) -> int: ...

    @property
    def text(self) -> str: ...

    def json(self) -> Any: ...


def auth_headers(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


def checked_json(reply: Reply) -> dict[str, Any]:
    """The JSON body of a 200 answer; any other status raises its :class:`HTTPError`."""
    if reply.status_code != 200:
        error = STATUS_ERRORS.get(reply.status_code, HTTPError)
        raise error(reply.status_code, error_detail(reply), error_code(reply))
    body: dict[str, Any] = reply.json()
    return body


def error_code(reply: Reply) -> str:
    """The ``code`` of an ``/api/v1`` error answer (``{"error": {code, message}}``), else
    ``""``."""
    try:
        error = reply.json().get("error")
    except (ValueError, AttributeError):
        return ""
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else ""


def error_detail(reply: Reply) -> Any:
    try:
        body = reply.json()
    except ValueError:
        return reply.text
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and "message" in error:  # the /api/v1 error shape
            return error["message"]
        return body.get("detail", reply.text)
    return reply.text


def os_reason(exc: BaseException) -> str | None:
    """Why a connection failed, as a few words, when the operating system said it
    (``connection refused``) in ``exc`` or what caused it; else None."""
    chain = _chain(exc)
    text = " ".join(str(part).lower() for part in chain)
    if "refused" in text or any(isinstance(p, ConnectionRefusedError) for p in chain):
        return "connection refused"
    if "name or service not known" in text or "nodename nor servname" in text:
        return "unknown host name"
    if "no route to host" in text or "network is unreachable" in text:
        return "no route to that address"
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what caused it (the async transport words a refusal only there)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 8:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def task_list_params(**query: str | int | None) -> dict[str, str | int]:
    """The query of ``GET /api/v1/tasks``: the values given."""
    return {name: value for name, value in query.items() if value is not None}


def task_list_body(body: dict[str, Any]) -> tuple[list[Any], str | None, int]:
    """``(items, next_cursor, total)`` of a page of ``GET /api/v1/tasks``, items as sent."""
    return list(body["items"]), body.get("next_cursor"), int(body["total"])
