"""``runyard studio``: a fresh one-time link that signs the Studio in to the running server.

The code is minted by the server itself (``POST /api/v1/login/codes``, server token only:
the one the CLI finds in ``server.json``, or ``--token``/``RUNYARD_TOKEN``); the link holds
the code, never the token (see :mod:`runyard.api.login`).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from runyard.cli.common import (
    ConfigOpt,
    LogDirOpt,
    TokenOpt,
    UrlOpt,
    WorkspaceOpt,
    fail,
    load_place,
)

MINT_PATH = "/api/v1/login/codes"
OpenOpt = Annotated[
    bool, typer.Option("--open", help="Also open the link in this machine's web browser")
]


def studio(
    open_browser: OpenOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
    workspace_dir: WorkspaceOpt = None,
    log_dir: LogDirOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Print a one-time Studio link for the workspace's running server (valid once, for a
    few minutes: opening it signs that browser tab in)."""
    from runyard.cli.backend import locate_server

    place = load_place(workspace_dir, log_dir, config)
    located = locate_server(place, url, token)
    if located is None:
        fail(
            f"No runyard server is running for the workspace {place.workspace_dir}: start one "
            "with `runyard serve` (its banner has a link too), or give --url"
        )
    address, admin = located
    code, lasts = _mint(address.rstrip("/"), admin)
    link = f"{address.rstrip('/')}/" + (f"#login={code}" if code else "")
    typer.echo(link)
    if code:
        from runyard.api.login import lifetime_words

        print(f"(one-time link, valid {lifetime_words(lasts)})", file=sys.stderr)
    if open_browser:
        import webbrowser

        if not webbrowser.open(link):
            print("no web browser could be opened here: open the link above", file=sys.stderr)


def _mint(address: str, token: str | None) -> tuple[str | None, float]:
    """(code, seconds it holds) from the server; a clear failure for every refusal."""
    import httpx

    headers = {"authorization": f"Bearer {token}"} if token else {}
    try:
        reply = httpx.post(address + MINT_PATH, headers=headers, json={}, timeout=30)
    except httpx.HTTPError as exc:
        fail(f"the server at {address} does not answer: {exc}")
    if reply.status_code == 401:
        fail(
            f"the server at {address} refused the token: run this on the server's machine as "
            "its user (the token is in its server.json), or give the server token"
        )
    if reply.status_code == 403:
        fail(f"the server at {address} refused: a login link needs the server (admin) token")
    try:
        answer = reply.json()
        code, lasts = answer["code"], float(answer["expiresInSeconds"])
    except (ValueError, KeyError, TypeError):
        fail(f"the server at {address} answered HTTP {reply.status_code}: {reply.text[:200]}")
    if reply.status_code != 200 or not (code is None or isinstance(code, str)):
        fail(f"the server at {address} answered HTTP {reply.status_code}: {reply.text[:200]}")
    return code, lasts
