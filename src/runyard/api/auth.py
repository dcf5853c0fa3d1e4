"""Bearer-token authentication as pure ASGI middleware.

* The configured server token (compared in constant time) opens every route.
* A run token issued by the agent-run backend opens ``/jobs``, ``/api/v1`` and ``/mcp``
  only; the routes themselves narrow it to its own session (``request.state.run_scope``).
  ``/metrics`` is the server token's alone. The rule is the same on the TCP listener as on
  the agent-run socket — the same routes, the same scope, nothing more: a run reaches the
  TCP port when it is given one (a pod on a cluster, ``kubernetes.job_api_url``) and where
  its network allows.
* ``/health`` and the Studio's static files are open: the Studio takes the token from the
  ``#token=`` fragment of the link ``serve`` prints (a fragment never reaches a server) or
  asks for it, and sends it only as a header.

On the agent-run Unix socket (``require_run_token=True``) only run tokens are accepted —
never the server (admin) token: the socket is reachable from inside runs, and a token that
leaked into one must not turn into admin rights there.
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
RUN_TOKEN_PREFIXES = ("/jobs", "/api/v1/", "/mcp")

RunTokenVerifier = Callable[[str], Any]


class BearerAuth:
    def __init__(
        self,
        app: ASGIApp,
        token: str | None,
        verify_run_token: RunTokenVerifier | None = None,
        *,
        require_run_token: bool = False,
    ) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.verify_run_token = verify_run_token
        self.require_run_token = require_run_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        open_route = self.token is None or is_open_route(scope)
        if not self.require_run_token and open_route:
            await self.app(scope, receive, send)
            return
        presented = _bearer(scope)
        if not self.require_run_token and self._is_server_token(presented):
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

    def _is_server_token(self, presented: str | None) -> bool:
        if not presented or self.token is None:
            return False
        return hmac.compare_digest(presented.encode(), self.token)

    def _run_scope(self, presented: str | None) -> Any:
        if not presented or self.verify_run_token is None:
            return None
        return self.verify_run_token(presented)


def is_open_route(scope: Scope) -> bool:
    """``/health`` and GET/HEAD of the Studio's static files; nothing else."""
    path: str = scope["path"]
    if path == "/health":
        return True
    if scope.get("method", "GET") not in ("GET", "HEAD") or ".." in path:
        return False
    return path in OPEN_PATHS or path.startswith(OPEN_STUDIO_PREFIXES)


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, credentials = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and credentials.strip():
                return credentials.strip()
    return None
