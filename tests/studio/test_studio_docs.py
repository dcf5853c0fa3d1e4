"""/docs: Swagger UI from files this package ships, under the Studio's strict policy."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import expect
from studio_support import console_errors, screenshot

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
    expect(page.locator(".opblock-tag").first).to_be_visible()
    expect(page.locator("#docs-note")).to_be_hidden()  # this tab's token opened the spec
    page.locator(".opblock-tag[data-tag='tasks']").click()
    expect(page.locator(".opblock-summary-path[data-path='/api/v1/tasks']")).to_be_visible()
    page.locator(".opblock-summary-path[data-path='/api/v1/tasks']").click()
    page.get_by_role("button", name="Try it out").click()
    page.get_by_role("button", name="Execute").click()
    expect(page.locator(".live-responses-table .response .response-col_status")).to_have_text("200")
    assert elsewhere == [], elsewhere
    screenshot(page, "api-docs")


def drawn_paths(page: Any) -> list[str]:
    """Open every tag of the page, then answer the paths of all operations drawn."""
    tags = page.locator(".opblock-tag")
    for index in range(tags.count()):
        tags.nth(index).click()
    expect(page.locator(".opblock-summary-path[data-path='/jobs/submit']")).to_be_visible()
    paths: list[str] = page.eval_on_selector_all(
        ".opblock-summary-path", "(all) => all.map((el) => el.dataset.path)"
    )
    return paths


def test_docs_draw_little_at_first_and_no_events_twins(studio: ServerProcess, page: Any) -> None:
    """What made the page slow: every operation drawn at once (the twins doubling the jobs)
    from a 3.1 description, which Swagger UI resolves through its costly ApiDOM path."""
    errors = console_errors(page)
    page.goto(f"{studio.url}/docs")
    expect(page.locator(".opblock-tag").first).to_be_visible()
    page.wait_for_timeout(300)
    assert page.locator(".opblock").count() == 0  # operations wait for their tag
    expect(page.locator(".info .version-stamp")).to_contain_text("OAS 3.0")
    note = page.locator("#docs-events-note")
    expect(note).to_be_visible()
    expect(note).to_contain_text("/jobs/<name>/events")

    paths = drawn_paths(page)
    with studio.client() as client:
        served = client.get("/openapi.json").json()
    twins = [p for p in served["paths"] if p.startswith("/jobs/") and p.endswith("/events")]
    assert len(twins) >= 10  # the server still describes them
    assert not [p for p in paths if p in twins], paths
    assert "/api/v1/runs/{run_id}/events" in paths  # an event stream with no twin stays
    assert {p for p in served["paths"] if p not in twins} == set(paths)
    assert errors == []


def test_the_drawn_description_says_the_same_in_30_terms(static_studio: str, page: Any) -> None:
    page.goto(static_studio + "/#/nowhere")
    page.wait_for_selector("h1")
    result = page.evaluate(
        """async () => {
          const { forDocsPage } = await import('/js/apispec.js');
          const spec = {
            openapi: '3.1.0',
            paths: {
              '/jobs/a': {}, '/jobs/a/events': {}, '/jobs/lonely/events': {},
              '/api/v1/runs/{id}/events': {},
            },
            components: { schemas: {
              Opt: { title: 'Opt', default: null,
                     anyOf: [{ type: 'string', maxLength: 5 }, { type: 'null' }] },
              Ref: { anyOf: [{ $ref: '#/components/schemas/Opt' }, { type: 'null' }] },
              Two: { anyOf: [{ type: 'string' }, { type: 'integer' }, { type: 'null' }] },
              Num: { type: 'number', exclusiveMinimum: 0, maximum: 9 },
              Listed: { type: ['integer', 'null'] },
              Plain: { anyOf: [{ type: 'string' }, { type: 'integer' }] },
            } },
          };
          const before = JSON.stringify(spec);
          const { spec: shown, hidden } = forDocsPage(spec);
          return { shown, hidden, untouched: JSON.stringify(spec) === before };
        }"""
    )
    shown = result["shown"]
    assert result["untouched"] and result["hidden"] == 1
    assert shown["openapi"] == "3.0.3"
    assert sorted(shown["paths"]) == ["/api/v1/runs/{id}/events", "/jobs/a", "/jobs/lonely/events"]
    schemas = shown["components"]["schemas"]
    assert schemas["Opt"] == {
        "title": "Opt", "default": None, "nullable": True, "type": "string", "maxLength": 5,
    }  # fmt: skip
    assert schemas["Ref"] == {"nullable": True, "allOf": [{"$ref": "#/components/schemas/Opt"}]}
    assert schemas["Two"] == {"nullable": True, "anyOf": [{"type": "string"}, {"type": "integer"}]}
    assert schemas["Num"] == {
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": 9,
    }
    assert schemas["Listed"] == {"type": "integer", "nullable": True}
    assert schemas["Plain"] == {"anyOf": [{"type": "string"}, {"type": "integer"}]}
