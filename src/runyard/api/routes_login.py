"""The Studio's sign-in by a one-time link (:mod:`runyard.api.login`).

``POST /api/v1/login`` ``{"code": "<code>"}`` — open (no token: the code is the credential).
Answers ``{"token": "<browser session token>", "expiresInSeconds": N}`` (``token`` is
``null`` when the server runs without auth), with ``Cache-Control: no-store``, once per
code; a spent, expired or unknown code answers 401 ``{"detail": "..."}`` saying to ask
``runyard studio`` for a new link. The request guard still applies: same-origin, JSON, this
server's ``Host``.

``POST /api/v1/login/codes`` — the admin only (a run token: 403). Mints a code:
``{"code": "<code>", "expiresInSeconds": 300}``; ``code`` is ``null`` when the server runs
without auth (its Studio needs no sign-in).

``POST /api/v1/logout`` — ends the browser session whose token the request carries
(``{"ended": true}``); the server token, which no one can end, answers ``{"ended": false}``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from runyard.api.auth import bearer_token
from runyard.api.login import BrowserSessions, LoginCodes
from runyard.api.requestbody import read_json_body
from runyard.api.scopes import request_scope
from runyard.api.services import Services
from runyard.errors import Forbidden, InvalidInput, LoginCodeRefused

EXCHANGE_BODY_LIMIT = 4096  # anyone may post here: a code needs a few dozen bytes
NO_STORE = {"Cache-Control": "no-store"}


def exchange(codes: LoginCodes, sessions: BrowserSessions, auth: bool, body: Any) -> Any:
    """A browser session for a valid code in ``body``; InvalidInput or LoginCodeRefused."""
    if not isinstance(body, dict) or set(body) != {"code"} or not isinstance(body["code"], str):
        raise InvalidInput('The body must be {"code": "<the code of a login link>"}')
    if not codes.redeem(body["code"]):
        raise LoginCodeRefused(
            "This login link has expired or was already used: run `runyard studio` for a new one"
        )
    return {"token": sessions.issue() if auth else None, "expiresInSeconds": sessions.ttl_seconds}


def build_login_router(services: Services) -> APIRouter:
    router = APIRouter(tags=["auth"])
    codes, sessions = services.login_codes, services.browser_sessions
    auth = services.settings.token is not None

    @router.post("/login", name="login")
    async def login(request: Request) -> Any:
        body = await read_json_body(request, EXCHANGE_BODY_LIMIT)
        return JSONResponse(exchange(codes, sessions, auth, body), headers=NO_STORE)

    @router.post("/login/codes", name="login_codes")
    async def mint(request: Request) -> Any:
        _admin_only(request)
        answer = {"code": codes.issue() if auth else None, "expiresInSeconds": codes.ttl_seconds}
        return JSONResponse(answer, headers=NO_STORE)

    @router.post("/logout", name="logout")
    async def logout(request: Request) -> Any:
        _admin_only(request)
        return {"ended": sessions.end(bearer_token(request.scope) or "")}

    return router


def _admin_only(request: Request) -> None:
    if request_scope(request) is not None:
        raise Forbidden("Studio sign-in is for the server (admin) token only, not a run token")
