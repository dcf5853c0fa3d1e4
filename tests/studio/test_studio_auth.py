"""With a token configured the Studio asks for it and sends it only as a header."""

from __future__ import annotations

from collections.abc import Iterator

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

    assert page.evaluate("sessionStorage.getItem('runyard.token')") == TOKEN
    assert all(TOKEN not in url for url, _ in requests)
    assert TOKEN not in page.url
    api_calls = [(url, auth) for url, auth in requests if "/jobs/" in url]
    assert api_calls and api_calls[-1][1] == f"Bearer {TOKEN}"

    page.click("#forget-token")
    expect(dialog).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('runyard.token')") is None
    page.click("#token-cancel")
    expect(page.locator(".alert-error")).to_contain_text("requires a token")
