"""The schedules client: ``/api/v1/schedules`` (admin token), reached as
``Client().schedules`` or ``AsyncClient().schedules``; it shares the client's connection.

>>> client.schedules.create("nightly", job="etl", cron="0 2 * * *", timezone="Europe/Berlin")
>>> client.schedules.trigger("nightly")["task_id"]
>>> client.schedules.backfill("nightly", "2026-03-01T00:00", "2026-03-07T00:00")

Answers are the server's JSON (see ``docs/workflows.md``, Schedules); errors raise
:class:`~runyard.errors.HTTPError` subclasses (``RequestInvalid`` for a 422,
``NotFound`` for an unknown name).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from runyard.client.answers import STATUS_ERRORS, error_code, error_detail
from runyard.client.calls import unreachable
from runyard.errors import HTTPError

ROOT = "/api/v1/schedules"
# ``list`` is also a method name below: annotations name this instead
Records = list[dict[str, Any]]


def checked(reply: httpx.Response) -> Any:
    """The JSON of a 200 or 201 answer; any other status raises its :class:`HTTPError`."""
    if reply.status_code not in (200, 201):
        error = STATUS_ERRORS.get(reply.status_code, HTTPError)
        raise error(reply.status_code, error_detail(reply), error_code(reply))
    return reply.json()


def path(name: str | None = None, action: str | None = None) -> str:
    parts = [ROOT] + ([quote(name, safe="")] if name is not None else [])
    return "/".join(parts + ([action] if action else []))


def create_body(name: str, settings: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, **{k: v for k, v in settings.items() if v is not None}}


class Schedules:
    """Schedules over a client's httpx connection."""

    def __init__(self, http: httpx.Client, url: str) -> None:
        self._http = http
        self._url = url

    def _json(self, method: str, target: str, **options: Any) -> Any:
        try:
            reply = self._http.request(method, target, **options)
        except httpx.TransportError as exc:
            raise unreachable(self._url, exc) from exc
        return checked(reply)

    def list(self) -> Records:
        return self._json("GET", path())["items"]

    def get(self, name: str, history_limit: int = 20) -> dict[str, Any]:
        return self._json("GET", path(name), params={"history_limit": history_limit})

    def history(self, name: str, limit: int = 50) -> dict[str, Any]:
        return self._json("GET", path(name, "history"), params={"limit": limit})

    def create(self, name: str, **settings: Any) -> dict[str, Any]:
        """Make schedule ``name``; ``settings`` as in runyard.yaml (``job``, ``cron``...)."""
        return self._json("POST", path(), json=create_body(name, settings))

    def delete(self, name: str) -> dict[str, Any]:
        return self._json("DELETE", path(name))

    def pause(self, name: str) -> dict[str, Any]:
        return self._json("POST", path(name, "pause"))

    def resume(self, name: str) -> dict[str, Any]:
        return self._json("POST", path(name, "resume"))

    def trigger(self, name: str) -> dict[str, Any]:
        """A run now; the history record (``outcome`` submitted, skipped or failed)."""
        return self._json("POST", path(name, "trigger"))

    def backfill(self, name: str, first: str, last: str) -> Records:
        """A run per tick in ``[first, last]``; their history records."""
        answer = self._json("POST", path(name, "backfill"), json={"from": first, "to": last})
        return answer["records"]


class AsyncSchedules:
    """:class:`Schedules` as coroutines."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self._http = http
        self._url = url

    async def _json(self, method: str, target: str, **options: Any) -> Any:
        try:
            reply = await self._http.request(method, target, **options)
        except httpx.TransportError as exc:
            raise unreachable(self._url, exc) from exc
        return checked(reply)

    async def list(self) -> Records:
        return (await self._json("GET", path()))["items"]

    async def get(self, name: str, history_limit: int = 20) -> dict[str, Any]:
        return await self._json("GET", path(name), params={"history_limit": history_limit})

    async def history(self, name: str, limit: int = 50) -> dict[str, Any]:
        return await self._json("GET", path(name, "history"), params={"limit": limit})

    async def create(self, name: str, **settings: Any) -> dict[str, Any]:
        return await self._json("POST", path(), json=create_body(name, settings))

    async def delete(self, name: str) -> dict[str, Any]:
        return await self._json("DELETE", path(name))

    async def pause(self, name: str) -> dict[str, Any]:
        return await self._json("POST", path(name, "pause"))

    async def resume(self, name: str) -> dict[str, Any]:
        return await self._json("POST", path(name, "resume"))

    async def trigger(self, name: str) -> dict[str, Any]:
        return await self._json("POST", path(name, "trigger"))

    async def backfill(self, name: str, first: str, last: str) -> Records:
        body = {"from": first, "to": last}
        answer = await self._json("POST", path(name, "backfill"), json=body)
        return answer["records"]
