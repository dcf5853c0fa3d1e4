"""Browser and network safety as pure ASGI middleware: on by default, token or not.

Any web page the user opens can make the browser send requests to the server (CSRF), and
a page on a DNS name its author controls can point that name at 127.0.0.1 and then read
the answers as its own (DNS rebinding). Browsers are told apart from other clients as Go
1.25's ``net/http.CrossOriginProtection`` does, by the headers only a browser sets; on
every TCP listener:

* ``Host`` must name this server: the bound address, ``localhost``/``127.0.0.1``/``[::1]``
  on a loopback bind, the machine's own name or any IP literal on a wildcard bind (an IP
  literal cannot be a rebound name), or an ``allowed_hosts`` entry (``name`` for any port,
  ``name:port`` for one). Else 403. Own names are accepted at any port: rebinding works
  through a name, not a port, and tunnels and port mappings (``ssh -L 9000:localhost:8765``,
  ``docker -p``) show the client another port than the one bound.
* An ``Origin`` header, on any method, must be the server's own origin (``http(s)://`` +
  the accepted Host) or an ``allowed_origins`` entry; ``Origin: null`` is foreign. Else
  403 — a rebound page's reads are refused too.
* A state-changing request (POST/PUT/PATCH/DELETE) whose ``Sec-Fetch-Site`` is anything
  but ``same-origin`` or ``none`` (a browser's own navigation) is refused (403), even with
  an Origin that matches the Host, unless its Origin is an ``allowed_origins`` entry (a
  trusted site is cross-site by definition). Every browser since 2023 sends the header
  and no page can forge it. An older browser sends none; the Origin check above is then
  what refuses a page's request.
* A request with neither ``Sec-Fetch-Site`` nor ``Origin`` is not from a browser (CLI,
  curl, scripts, the client) and passes these checks.

Bodies are read as what their route expects, so a state-changing request with a body must
declare ``application/json`` (or ``+json``); ``multipart/form-data`` on the upload route;
``application/x-tar`` on the sync receive route (``/api/v1/sync/tasks/...``), whose body
is a task folder streamed as a tar; ``application/octet-stream`` on AxonX's ``POST
/files`` (the raw bytes of one file, or a multipart form); any type on an MLflow artifact
upload (``/mlflow/api/2.0/mlflow-artifacts/artifacts/...``), whose body is the file as it
is (its client names the file's own type, ``text/plain`` for a ``.txt``). Else 415
(``text/plain`` included). A bodyless request (no ``Transfer-Encoding``, and no
``Content-Length`` or one of 0) to a JSON route needs no content type: ``curl -X POST
.../sessions/<id>/close`` sends none, and there is no body to misread. A content type it
does declare is still held to JSON, as the routes that read an optional body hold it
(:mod:`runyard.api.requestbody`), so a route answers the same whether or not it reads its
body. The upload and sync routes take their type always: their body is the point of the
request.

The agent-run Unix socket is reached only by runs, never by a browser; its listener marks
its requests (:func:`agent_socket_channel`), which then skip the Host, Origin and
``Sec-Fetch-Site`` checks (a run says ``Host: runyard``) but not the content type.

>>> app = RequestGuard(app, HostPolicy.for_settings(settings), settings.allowed_origins)
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from runyard.config import Settings
from runyard.errors import ForeignHost, ForeignOrigin, RunyardError, UnsupportedMediaType

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
UPLOAD_PATH = "/api/v1/artifacts/upload"
SYNC_RECEIVE_PREFIX = "/api/v1/sync/tasks/"
TAR_MEDIA = "application/x-tar"
MLFLOW_ARTIFACTS_PREFIX = "/mlflow/api/2.0/mlflow-artifacts/artifacts/"
FILES_PATH = "/files"
OCTET_MEDIA = "application/octet-stream"
MULTIPART_MEDIA = "multipart/form-data"
AGENT_SOCKET_KEY = "runyard.agent_socket"
# what a browser says of a request its own page (or the user, typing a URL) made
OWN_FETCH_SITES = frozenset({"same-origin", "none"})
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})
WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _split_host(value: str) -> tuple[str, int | None] | None:
    """``name[:port]`` or ``[v6][:port]`` → (lower-case name, port); None if malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        name, rest = value[: end + 1], value[end + 1 :]
        if end < 0 or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else None
    else:
        name, sep, port_text_ = value.partition(":")
        port_text = port_text_ if sep else None
    if not name or (port_text is not None and not port_text.isdigit()):
        return None
    return name, int(port_text) if port_text is not None else None


def _ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return name.startswith("[") or ":" not in name


def _own_name(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host.lower()


@dataclass(frozen=True)
class HostPolicy:
    """Which ``Host`` values name this server (see the module docstring)."""

    names: frozenset[str]
    any_ip: bool
    allowed: tuple[tuple[str, int | None], ...]

    @classmethod
    def for_settings(cls, settings: Settings) -> HostPolicy:
        bound = settings.host.strip().lower()
        names = {_own_name(bound)} if bound not in WILDCARDS else set()
        if _is_loopback(bound):
            names |= LOOPBACK_NAMES
        wildcard = bound in WILDCARDS
        if wildcard:
            names |= LOOPBACK_NAMES | {socket.gethostname().lower(), socket.getfqdn().lower()}
        allowed = tuple(p for p in map(_split_host, settings.allowed_hosts) if p is not None)
        return cls(frozenset(names), wildcard, allowed)

    def accepts(self, host_header: str | None) -> bool:
        parsed = _split_host(host_header or "")
        if parsed is None:
            return False
        name, given = parsed
        for allowed_name, allowed_port in self.allowed:
            if name == allowed_name and allowed_port in (None, given):
                return True
        return name in self.names or (self.any_ip and _ip_literal(name))


def _origin_key(origin: str) -> str:
    return origin.strip().lower().rstrip("/")


class RequestGuard:
    """Refuses foreign ``Host``/``Origin`` and cross-site state changes (403), and bodies
    of a type their route does not take (415)."""

    def __init__(
        self,
        app: ASGIApp,
        hosts: HostPolicy,
        allowed_origins: list[str] | tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.hosts = hosts
        self.allowed_origins = frozenset(_origin_key(o) for o in allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            from runyard.api.errormap import render  # heavy: loaded by the first refusal

            await render(refusal, scope["path"])(scope, receive, send)

    def _refusal(self, scope: Scope) -> RunyardError | None:
        headers = _headers(scope)
        changes = scope["type"] == "http" and scope["method"] in STATE_CHANGING
        if not scope.get(AGENT_SOCKET_KEY):
            refusal = self._browser_refusal(headers, changes)
            if refusal is not None:
                return refusal
        if changes:
            return _content_type_refusal(scope["path"], headers)
        return None

    def _browser_refusal(self, headers: dict[str, str], changes: bool) -> RunyardError | None:
        host = headers.get("host")
        if not self.hosts.accepts(host):
            return ForeignHost(f"Host {host!r} does not name this server")
        origin = headers.get("origin")
        if origin is not None and not self._own_origin(origin, host or ""):
            return ForeignOrigin(f"Requests from origin {origin!r} are refused")
        site = headers.get("sec-fetch-site")
        if changes and site is not None and not self._own_site(site, origin):
            return ForeignOrigin(f"Cross-site requests are refused (Sec-Fetch-Site: {site!r})")
        return None

    def _own_site(self, site: str, origin: str | None) -> bool:
        """What a browser says of the page behind a request: its own, or a trusted one."""
        if site.strip().lower() in OWN_FETCH_SITES:
            return True
        return origin is not None and _origin_key(origin) in self.allowed_origins

    def _own_origin(self, origin: str, host: str) -> bool:
        key = _origin_key(origin)
        if key in self.allowed_origins:
            return True
        scheme, sep, netloc = key.partition("://")
        return bool(sep) and scheme in ("http", "https") and netloc == host.strip().lower()


def _content_type_refusal(path: str, headers: dict[str, str]) -> UnsupportedMediaType | None:
    media = headers.get("content-type", "").split(";")[0].strip().lower()
    if path == UPLOAD_PATH:
        if media == "multipart/form-data":
            return None
        expected = "a multipart/form-data upload"
    elif path.startswith(SYNC_RECEIVE_PREFIX):
        if media == TAR_MEDIA:
            return None
        expected = f"a task as a tar stream ({TAR_MEDIA})"
    elif path.startswith(MLFLOW_ARTIFACTS_PREFIX):  # a file's own bytes, of its own type
        return None
    elif path == FILES_PATH:  # a POST's body is one file's bytes; a DELETE has none
        if media in (OCTET_MEDIA, MULTIPART_MEDIA) or not (media or _has_body(headers)):
            return None
        expected = f"the raw bytes of one file ({OCTET_MEDIA}) or a {MULTIPART_MEDIA} upload"
    elif _is_json(media) or not (media or _has_body(headers)):
        return None
    else:
        expected = "a JSON body (application/json)"
    got = repr(media) if media else "no content type"
    return UnsupportedMediaType(f"Expected {expected}, got {got}")


def _has_body(headers: dict[str, str]) -> bool:
    """Whether the request's framing announces a body (a malformed length counts as one)."""
    if "transfer-encoding" in headers:
        return True
    length = headers.get("content-length")
    return length is not None and not (length.strip().isdigit() and int(length) == 0)


def _is_json(media: str) -> bool:
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _headers(scope: Scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        # repeated headers combine as HTTP says; a doubled Host or Origin then matches nothing
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out


def agent_socket_channel(app: ASGIApp) -> ASGIApp:
    """Mark requests as arriving on the agent-run Unix socket (set by its listener only)."""

    async def marked(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = {**scope, AGENT_SOCKET_KEY: True}
        await app(scope, receive, send)

    return marked
