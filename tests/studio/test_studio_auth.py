"""With a token configured the Studio asks for it, trades it for a browser session token and
sends that only as a header; an old ``#token=`` link still signs in the same way."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import expect
from studio_support import screenshot

from serverproc import ServerProcess, start_server

pytestmark = pytest.mark.browser

TOKEN = "studio-test-token-5f1c"


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("locked-server"), token=TOKEN)
    try:
        yield server
    finally:
        server.stop()


def test_token_prompt_on_401_and_header_only(locked, page):
    locked.call("submit", task="demo", x=1, y=1, task_name="behind-auth")
    requests = []
    page.on("request", lambda r: requests.append((r.url, r.headers.get("authorization"))))
    page.goto(locked.url + "/#/tasks")
    dialog = page.locator("#token-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#token-input")).to_be_focused()
    screenshot(page, "token-prompt", full_page=False)

    page.fill("#token-input", "wrong-token")
    page.keyboard.press("Enter")
    expect(page.locator("#token-reason")).to_contain_text("refused")
    expect(dialog).to_be_visible()

    page.fill("#token-input", TOKEN)
    page.click("#token-submit")
    expect(dialog).to_be_hidden()
    expect(page.locator("tr[data-task-id='base#demo#behind-auth']")).to_be_visible()
    expect(page.locator("#forget-token")).to_be_visible()

    kept = page.evaluate("sessionStorage.getItem('runyard.token')")
    assert kept and kept != TOKEN  # the typed token was traded, not kept
    assert all(TOKEN not in url for url, _ in requests)
    assert TOKEN not in page.url
    api_calls = [(url, auth) for url, auth in requests if "/jobs/" in url]
    assert api_calls and api_calls[-1][1] == f"Bearer {kept}"
    minted = [auth for url, auth in requests if url.endswith("/api/v1/login/codes")]
    assert minted[-1] == f"Bearer {TOKEN}"  # the only request that carried it

    page.click("#forget-token")
    expect(dialog).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('runyard.token')") is None
    assert ended(locked, kept)  # forgetting ends the session on the server too
    page.click("#token-cancel")
    expect(page.locator(".alert-error")).to_contain_text("requires a token")


def ended(server: ServerProcess, session: str) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        reply = httpx.get(server.url + "/jobs", headers={"authorization": f"Bearer {session}"})
        if reply.status_code == 401:
            return True
        time.sleep(0.1)
    return False


def test_an_old_token_link_still_signs_in_and_leaves_no_trace(studio, chromium):
    """``/#token=...`` (what ``serve`` printed before login links): still accepted, since the
    browser recorded the address before any script ran and refusing it would undo nothing.
    The task list loads with no prompt, the token leaves the address bar and this history
    entry at once, goes over the wire only as the header of the one request that trades it
    for a session token, and the tab keeps the session token, not the server's."""
    link = f"{studio.url}/#token={studio.token}"
    context = chromium.new_context()
    try:
        page = context.new_page()
        requests = []
        page.on("request", lambda r: requests.append((r.url, r.headers)))
        page.goto(link)
        expect(page.locator("#tasks-table tbody tr.row-link").first).to_be_visible()
        expect(page.locator("#token-dialog")).to_be_hidden()
        assert studio.token not in page.url and "token" not in page.url
        page.go_back()  # the entry was replaced: no step of the history holds the token
        assert page.url == "about:blank"
        page.go_forward()
        assert page.url == f"{studio.url}/"
        assert studio.token not in page.evaluate("location.href + document.referrer")
        kept = page.evaluate("sessionStorage.getItem('runyard.token')")
        assert kept and kept != studio.token
        page.reload()  # the tab keeps its session, the address stays clean
        expect(page.locator("#tasks-table tbody tr.row-link").first).to_be_visible()
        assert studio.token not in page.url
    finally:
        context.close()
    carried = []
    for url, headers in requests:
        assert studio.token not in url
        others = {k: v for k, v in headers.items() if k != "authorization"}
        assert studio.token not in str(others)
        if headers.get("authorization") == f"Bearer {studio.token}":
            carried.append(url)
    assert carried == [f"{studio.url}/api/v1/login/codes"]
    assert any(h.get("authorization") == f"Bearer {kept}" for _, h in requests)
    assert studio.token not in "".join(studio.output)  # the banner holds a code only
