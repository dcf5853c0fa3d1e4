"""Reading a request's JSON body (a size limit, the JSON content type, the one parser) and
validating a Job envelope.

Its refusals are family errors (:class:`~runyard.errors.BodyTooLarge`,
:class:`~runyard.errors.UnsupportedMediaType`, :class:`~runyard.api.jsonbody.BadJsonBody`)
raised as the HTTPException of their row in :mod:`runyard.api.errormap`: the routes that
read bodies shape HTTPExceptions their own way (the agent routes as the ``/api/v1`` error
object, the rest as FastAPI's ``{"detail"}``), and that stays as it was.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from pydantic import BaseModel, ValidationError

from runyard.api.errormap import as_http_exception, envelope_refusal
from runyard.api.jsonbody import BadJsonBody, parse_json_body
from runyard.errors import BodyTooLarge, UnsupportedMediaType

# not text/plain nor forms: a browser sends those cross-origin without asking (CSRF)
JSON_TYPES = ("application/json",)


async def read_json_body(request: Request, limit: int) -> Any:
    """The request's JSON body; its refusals (past ``limit`` bytes, not JSON) are raised as
    the HTTPExceptions of their rows in :mod:`runyard.api.errormap`."""
    try:
        return await _read_json_body(request, limit)
    except (BadJsonBody, BodyTooLarge, UnsupportedMediaType) as exc:
        raise as_http_exception(exc) from exc


async def _read_json_body(request: Request, limit: int) -> Any:
    media = request.headers.get("content-type", "application/json").split(";")[0].strip()
    if media and media not in JSON_TYPES and not media.endswith("+json"):
        raise UnsupportedMediaType(f"Expected a JSON body (application/json), got {media!r}")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"Request body exceeds the limit of {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge(f"Request body exceeds the limit of {limit} bytes")
    if not body.strip():
        return {}
    return parse_json_body(body)


def validate_envelope(model: type[BaseModel], data: Any) -> BaseModel:
    """The Job envelope ``data`` as ``model``; refused as FastAPI refuses a body (the list of
    pydantic's errors under ``detail``), with the status of the error table."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise envelope_refusal(jsonable_errors(exc)) from exc


def jsonable_errors(exc: ValidationError) -> list[dict[str, Any]]:
    return json.loads(exc.json(include_url=False, include_context=False))
