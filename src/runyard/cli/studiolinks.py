"""The Studio links commands print: a page of the Studio, signed in where the CLI may.

A link to a page needs a sign-in to show anything on a server with auth. Where the CLI holds
the server token (on the server's machine, from ``server.json``), the link is a one-time
login link (``#login=<code>&to=<route>``): opening it signs that tab in and goes to the page
(see :mod:`runyard.api.login`; the code is valid once, for ``login_link_seconds``). Anywhere
else (a run token, a server that refuses, a file-only run) it is the plain page address,
and the Studio's sign-in box says where a token or link comes from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from runyard.client import Client


def route(kind: str, ident: str) -> str:
    """The Studio's route of one page (``/tasks/<id>``, ``/pipelines/<id>``), the id encoded."""
    return f"/{kind}/{quote(ident, safe='')}"


def compare_route(refs: list[str]) -> str:
    """The Studio's compare view of ``refs`` (task ids, ``<id>@<run id>`` for a run):
    ``/compare?ids=<refs, comma separated, encoded>``."""
    return "/compare?ids=" + quote(",".join(refs), safe="")


def page_link(base_url: str, page: str, client: Client | None = None) -> str:
    """The address of ``page`` (a :func:`route`): a one-time login link to it when
    ``client`` may mint one, else the plain address."""
    base = base_url.rstrip("/")
    code = _login_code(client) if client is not None else None
    if code is None:
        return f"{base}/#{page}"
    return f"{base}/#login={quote(code, safe='')}&to={page}"  # a route, encoded as it is


def _login_code(client: Client) -> str | None:
    from runyard.errors import RunyardError

    try:
        answer = client.login_code()
    except (RunyardError, OSError, ValueError):
        return None  # not the server token, an older server: the plain link does
    code = answer.get("code") if isinstance(answer, dict) else None
    return code if isinstance(code, str) and code else None
