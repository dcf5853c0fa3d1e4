"""Bearer-token authentication as pure ASGI middleware.

* The configured server token (compared in constant time) opens every route, and so does
  the token of a Studio tab signed in by a login link (a browser session of the admin,
  :mod:`runyard.api.login`).
* A run token issued by the agent-run backend opens ``/jobs``, ``/api/v1``, ``/mcp`` and
  AxonX's ``/files`` only; the routes themselves narrow it to its own session
  (``request.state.run_scope``) or refuse it (403: ``/files`` is the admin's).
  ``/metrics`` is the server token's alone. The rule is the same on the TCP listener as on
  the agent-run socket — the same routes, the same scope, nothing more: a run reaches the
  TCP port when it is given one (a pod on a cluster, ``kubernetes.job_api_url``) and where
  its network allows.
* ``/health`` and the Studio's static files are open, and ``POST /api/v1/login``, where the
  Studio trades the one-time code of a login link (``serve`` and ``runyard studio`` print
  ``/#login=<code>``) for a browser session token, which it sends only as a header.

On the agent-run Unix socket (``require_run_token=True``) only run tokens are accepted —
never the server (admin) token: the socket is reachable from inside runs, and a token that
leaked into one must not turn into admin rights there (a browser session neither).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from runyard.errors import NotAuthenticated

# Open without a token: the health probe and the Studio's own files (read-only), and the
# /docs page (static HTML; the /openapi.json it reads needs the token). Everything else
# needs one, so a route added later is protected without being listed anywhere.
OPEN_PATHS = frozenset({"/health", "/", "/index.html", "/favicon.svg", "/docs"})
OPEN_STUDIO_PREFIXES = ("/css/", "/js/")
LOGIN_PATH = "/api/v1/login"  # the code in its body is the credential
RUN_TOKEN_PREFIXES = ("/jobs", "/api/v1/", "/mcp", "/files")

RunTokenVerifier = Callable[[str], Any]
SessionVerifier = Callable[[str], bool]


class BearerAuth:
    def __init__(
        self,
        app: ASGIApp,
        token: str | None,
        verify_run_token: RunTokenVerifier | None = None,
        *,
        require_run_token: bool = False,
        verify_browser_session: SessionVerifier | None = None,
    ) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.verify_run_token = verify_run_token
        self.require_run_token = require_run_token
        self.verify_browser_session = verify_browser_session

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        open_route = self.token is None or is_open_route(scope)
        if not self.require_run_token and open_route:
            await self.app(scope, receive, send)
            return
        presented = bearer_token(scope)
        if not self.require_run_token and self._is_admin(presented):
            await self.app(scope, receive, send)
            return
        run_scope = self._run_scope(presented)
        if run_scope is not None and path.startswith(RUN_TOKEN_PREFIXES):
            scope.setdefault("state", {})["run_scope"] = run_scope
            await self.app(scope, receive, send)
            return
        from runyard.api.errormap import render  # heavy: loaded by the first refusal

        refusal = NotAuthenticated("Missing or invalid bearer token")
        await render(refusal, path)(scope, receive, send)

    def _is_admin(self, presented: str | None) -> bool:
        if not presented or self.token is None:
            return False
        if hmac.compare_digest(presented.encode(), self.token):
            return True
        verify = self.verify_browser_session
        return verify is not None and verify(presented)

    def _run_scope(self, presented: str | None) -> Any:
        if not presented or self.verify_run_token is None:
            return None
        return self.verify_run_token(presented)


def is_open_route(scope: Scope) -> bool:
    """``/health``, GET/HEAD of the Studio's static files and the login POST; nothing else."""
    path: str = scope["path"]
    if path == "/health":
        return True
    if path == LOGIN_PATH:
        return scope.get("method") == "POST"
    if scope.get("method", "GET") not in ("GET", "HEAD") or ".." in path:
        return False
    return path in OPEN_PATHS or path.startswith(OPEN_STUDIO_PREFIXES)


def bearer_token(scope: Scope) -> str | None:
    """The credentials of the request's ``Authorization: Bearer`` header, if any."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, credentials = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and credentials.strip():
                return credentials.strip()
    return None
