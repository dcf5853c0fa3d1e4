"""What a browser keeps on disk after a sign-in by login link: no server token anywhere in
its profile (history, session restore, favicons, caches, Session Storage, Local Storage),
and no session token where it outlives the browser (Local Storage, IndexedDB).

A real Chromium with a profile folder of its own (a persistent context: what a user's
browser writes), signed in by the banner's link, then closed so it writes its databases
out; every file of the profile is then read as bytes, and each secret looked for as ASCII
and as UTF-16 (Chromium keeps web storage values in UTF-16)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from studio_support import CHROMIUM, CHROMIUM_ARGS, finish, submit

from serverproc import ServerProcess, start_server

pytestmark = pytest.mark.browser

ROW = "tr[data-task-id='base#demo#on-disk']"
OUTLIVES_THE_BROWSER = ("Local Storage", "IndexedDB")


@pytest.fixture(scope="module")
def playwright_api() -> Iterator[Any]:
    """Playwright itself (a persistent context is launched from it, not from a browser)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        yield playwright


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("profile-server"))
    try:
        finish(server, submit(server, "demo", x=2, y=2, task_name="on-disk"))
        yield server
    finally:
        server.stop()


def encodings(secret: str) -> list[bytes]:
    return [secret.encode(), secret.encode("utf-16-le"), secret.encode("utf-16-be")]


def files_holding(profile: Path, secret: str) -> list[str]:
    """Every file under ``profile`` whose bytes hold ``secret`` in any of its encodings."""
    found = []
    for path in sorted(profile.rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if any(form in data for form in encodings(secret)):
                found.append(str(path.relative_to(profile)))
    return found


def test_a_signed_in_browser_keeps_no_server_token_on_disk(
    fresh: ServerProcess, playwright_api: Any, tmp_path: Path
) -> None:
    link = re.search(r"Studio: (\S+#login=\S+)", "".join(fresh.output))
    assert link and fresh.token
    code = link.group(1).split("#login=")[1]
    profile = tmp_path / "profile"
    context = playwright_api.chromium.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
    )
    try:
        context.set_default_timeout(15_000)
        page = context.pages[0] if context.pages else context.new_page()
        sent: set[str] = set()  # what the tab signs its requests with
        page.on("request", lambda request: sent.add(request.headers.get("authorization", "")))
        page.goto(link.group(1))
        page.wait_for_selector(ROW)  # data that needs auth: signed in
        assert page.url == f"{fresh.url}/" and code not in page.url
        page.goto(fresh.url + "/#/submit")  # a few more pages, as a user goes on
        page.goto(fresh.url + "/#/tasks")
        page.wait_for_selector(ROW)
    finally:
        context.close()  # the browser writes its databases out
    # the check can see: the browser did record the link it opened, code and all (spent)
    assert "Default/History" in files_holding(profile, code)
    assert files_holding(profile, fresh.token) == []
    bearers = {value.removeprefix("Bearer ") for value in sent if value}
    assert len(bearers) == 1 and fresh.token not in bearers
    session = bearers.pop()
    lasting = [f for f in files_holding(profile, session) if f.split("/")[1:2] and
               f.split("/")[1] in OUTLIVES_THE_BROWSER]  # fmt: skip
    assert lasting == []
