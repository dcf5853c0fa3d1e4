"""/docs: Swagger UI from files this package ships, under the Studio's strict policy."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import expect
from studio_support import screenshot

from serverproc import ServerProcess

pytestmark = pytest.mark.browser

ASSET = re.compile(r"""\b(?:src|href)\s*=\s*["']([^"']+)["']""")


def test_docs_page_names_no_other_host_and_needs_no_token(studio: ServerProcess) -> None:
    reply = httpx.get(f"{studio.url}/docs")  # no token: the page is static, like the Studio's
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/html")
    policy = reply.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert "unsafe-eval" not in policy and "default-src 'none'" in policy
    assert not re.search(r"<script\b[^>]*>\s*[^<\s]", reply.text), "inline script"
    assets = ASSET.findall(reply.text)
    assert len(assets) >= 4, assets
    for asset in assets:
        parts = urlsplit(asset)
        assert not parts.scheme and not parts.netloc, f"{asset} is loaded from elsewhere"
        if asset != "/":
            assert httpx.get(f"{studio.url}{asset}").status_code == 200, asset
    # what the page describes stays behind the token; ReDoc (a CDN page) is not served
    assert httpx.get(f"{studio.url}/openapi.json").status_code == 401
    with studio.client() as client:
        assert client.get("/openapi.json").status_code == 200
        assert client.get("/redoc").status_code == 404


def test_docs_render_offline(studio: ServerProcess, page: Any) -> None:
    """Every request to another host is aborted, as on a machine without a network."""
    elsewhere: list[str] = []

    def only_here(route: Any) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", only_here)
    page.goto(f"{studio.url}/docs")
    operations = page.locator(".opblock")
    expect(operations.first).to_be_visible()
    expect(page.locator(".opblock-summary-path[data-path='/api/v1/tasks']")).to_be_visible()
    assert operations.count() > 10
    expect(page.locator("#docs-note")).to_be_hidden()  # this tab's token opened the spec
    page.locator(".opblock-summary-path[data-path='/api/v1/tasks']").click()
    page.get_by_role("button", name="Try it out").click()
    page.get_by_role("button", name="Execute").click()
    expect(page.locator(".live-responses-table .response .response-col_status")).to_have_text("200")
    assert elsewhere == [], elsewhere
    screenshot(page, "api-docs")
