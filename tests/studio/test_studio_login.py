"""The login link ``serve`` prints: it signs a tab in once, leaves no code in the address and
no server token in the tab; a spent link says how to get a new one."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect
from studio_support import finish, screenshot, submit

from serverproc import ServerProcess, start_server

pytestmark = pytest.mark.browser

ROW = "tr[data-task-id='base#demo#signed-in']"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server of this module's own: its banner's code is used here, within minutes."""
    server = start_server(tmp_path_factory.mktemp("login-link"))
    try:
        finish(server, submit(server, "demo", x=1, y=2, task_name="signed-in"))
        yield server
    finally:
        server.stop()


def banner_link(server: ServerProcess) -> tuple[str, str]:
    found = re.search(r"Studio: (\S+#login=(\S+))", "".join(server.output))
    assert found, server.output
    return found.group(1), found.group(2)


def open_tab(chromium: Any) -> tuple[Any, Any, list[Any], list[str]]:
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    requests: list[Any] = []
    errors: list[str] = []
    page.on("request", lambda request: requests.append(request))
    page.on("pageerror", lambda error: errors.append(str(error)))
    return context, page, requests, errors


def test_the_banner_link_signs_in_once_and_leaves_no_code(fresh: ServerProcess, chromium: Any):
    link, code = banner_link(fresh)
    assert fresh.token and fresh.token not in link
    context, page, requests, errors = open_tab(chromium)
    try:
        page.goto(link)
        expect(page.locator(ROW)).to_be_visible()  # data that needs auth: signed in
        expect(page.locator("#token-dialog")).to_be_hidden()
        assert page.url == f"{fresh.url}/"  # the code left the address bar at once
        page.go_back()  # and this history entry: no step of the tab's history holds it
        assert page.url == "about:blank"
        page.go_forward()
        assert page.url == f"{fresh.url}/" and code not in page.evaluate("document.referrer")
        kept = page.evaluate("sessionStorage.getItem('runyard.token')")
        assert kept and kept != fresh.token
        page.reload()  # the tab stays signed in
        expect(page.locator(ROW)).to_be_visible()
    finally:
        context.close()
    assert not errors, errors
    for request in requests:
        assert code not in request.url and fresh.token not in request.url
        assert fresh.token not in str(request.headers)
    exchanges = [r for r in requests if r.url.endswith("/api/v1/login")]
    assert len(exchanges) == 1 and code in (exchanges[0].post_data or "")


def test_a_spent_link_says_how_to_get_a_new_one(fresh: ServerProcess, chromium: Any):
    link, code = banner_link(fresh)
    context, page, _, errors = open_tab(chromium)
    page.goto(link)  # spent by the test above, or here first: either way spent from now on
    page.wait_for_selector("#forget-token:not([hidden]), #login-failed")
    context.close()
    context, page, _, errors = open_tab(chromium)  # a tab that is not signed in
    try:
        page.goto(link)
        failed = page.locator("#login-failed")
        expect(failed).to_be_visible()
        expect(failed).to_contain_text("expired or was already used")
        expect(failed).to_contain_text("runyard studio")
        expect(page.locator("#token-dialog")).to_be_hidden()  # a clear page, not a prompt
        assert code not in page.url
        assert page.evaluate("sessionStorage.getItem('runyard.token')") is None
        screenshot(page, "login-link-spent", full_page=False)
        page.get_by_role("link", name="sign in with the access token").click()
        expect(page.locator("#token-dialog")).to_be_visible()
    finally:
        context.close()
    assert not errors, errors
