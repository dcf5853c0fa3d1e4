"""What the clients send and read for pipeline runs (``/api/v1/pipelines/runs``).

A pipeline is taken as it describes itself (its ``wire(**params)``, see
:class:`runyard.pipelines.build.Pipeline`), or as that wire form already built (a dict),
so the client imports nothing of the pipelines package. A run is started with an
Idempotency-Key and sent again after a lost connection: a retry answers the first run.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any
from urllib.parse import quote

import httpx

from runyard.client.answers import checked_json
from runyard.client.calls import IDEMPOTENCY_HEADER, KEYED_ATTEMPTS, RETRY_PAUSE, unreachable

RUNS = "/api/v1/pipelines/runs"
UNFINISHED = "running"


def run_body(pipeline: Any, params: dict[str, Any]) -> dict[str, Any]:
    """The request body of a run of ``pipeline`` with ``params`` over its defaults."""
    if isinstance(pipeline, dict):
        given = dict(pipeline)
        if params:
            given["params"] = {**given.get("params", {}), **params}
        return given
    wire = getattr(pipeline, "wire", None)
    if not callable(wire):
        raise TypeError(f"run_pipeline() takes a runyard.Pipeline, got {type(pipeline).__name__}")
    body: dict[str, Any] = wire(**params)
    return body


def run_path(run_id: str, action: str = "") -> str:
    path = f"{RUNS}/{quote(run_id, safe='')}"
    return f"{path}/{action}" if action else path


def finished(run: dict[str, Any]) -> bool:
    """Whether every step of ``run`` (an answer of the server) has ended."""
    return run.get("state") != UNFINISHED


def post_run(http: httpx.Client, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """``POST`` the run ``body`` with a fresh Idempotency-Key, again on a lost connection."""
    headers = {IDEMPOTENCY_HEADER: uuid.uuid4().hex}
    for attempt in range(KEYED_ATTEMPTS):
        try:
            return checked_json(http.post(RUNS, json=body, headers=headers))
        except httpx.TransportError as exc:
            if attempt + 1 >= KEYED_ATTEMPTS:
                raise unreachable(url, exc) from exc
            time.sleep(RETRY_PAUSE * 2**attempt)
    raise AssertionError("unreachable")  # pragma: no cover


async def apost_run(http: httpx.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """:func:`post_run` for the async client."""
    headers = {IDEMPOTENCY_HEADER: uuid.uuid4().hex}
    for attempt in range(KEYED_ATTEMPTS):
        try:
            return checked_json(await http.post(RUNS, json=body, headers=headers))
        except httpx.TransportError as exc:
            if attempt + 1 >= KEYED_ATTEMPTS:
                raise unreachable(url, exc) from exc
            await asyncio.sleep(RETRY_PAUSE * 2**attempt)
    raise AssertionError("unreachable")  # pragma: no cover
