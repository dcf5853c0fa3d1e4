"""studio.pages in the Studio's navigation (Chromium): one entry per configured page, in the
config's order, each opening the view it names under its title; a page id that is not a
slug never reaches a link (a javascript: page id is refused at load), and an address of
no page says so. No console errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect
from studio_support import console_errors, sign_in_by_link

from serverproc import ServerProcess, start_server

pytestmark = pytest.mark.browser

PAGES = {
    "online": {"title": {"en": "Online prediction", "zh": "在线预测"}, "view": "pipeline",
               "category": "online_prediction"},
    "data": {"title": {"en": "Data updates", "zh": "数据更新"}, "view": "tasks",
             "category": "data_update"},
    "sync": {"title": {"en": "Synchronization", "zh": "同步"}, "view": "schedules",
             "schedules": ["close-report", "gone"]},
    "all-schedules": {"title": {"en": "<img src=x onerror=alert(1)>", "zh": "全部"},
                      "view": "schedules"},
}  # fmt: skip
CONFIG = {
    "studio": {"pages": PAGES},
    "schedules": {"close-report": {"job": "demo", "cron": "0 16 1 1 *", "arguments": {"x": 1, "y": 2}}},
}  # fmt: skip


@pytest.fixture(scope="module")
def paged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("studio-pages"), config=CONFIG)
    try:
        handle = server.call("submit", task="demo", x=1, y=2)["answer"]
        server.call("wait_task", task_id=handle["task_id"], run_id=handle["run_id"])
        yield server
    finally:
        server.stop()


def test_pages_are_navigation_entries_opening_their_view(paged: ServerProcess, page: Any) -> None:
    errors = console_errors(page)
    sign_in_by_link(page, paged)
    page.goto(paged.url + "/#/tasks")
    links = page.locator("nav [data-studio-page] a")
    expect(links).to_have_count(4)
    # the server read its (sorted) config file: the nav keeps the job's order
    listed = [p["id"] for p in paged.call("list_studio_pages")["answer"]]
    assert [a.get_attribute("data-nav") for a in links.all()] == [f"page:{i}" for i in listed]
    for a in links.all():
        href = a.get_attribute("href")
        assert href is not None and href.startswith("#/pages/"), href
    hostile = page.locator("[data-studio-page='all-schedules'] a")
    expect(hostile).to_have_text("<img src=x onerror=alert(1)>")  # text, never markup
    assert page.locator("nav img[src='x']").count() == 0

    page.click("[data-studio-page='data'] a")
    expect(page).to_have_url(paged.url + "/#/pages/data")
    expect(page.locator("#studio-page-title")).to_have_text("Data updates")
    expect(page.locator("a[data-nav='page:data']")).to_have_attribute("aria-current", "page")
    expect(page.locator(".studio-page-view tbody tr").first).to_contain_text("demo")
    assert page.locator("main h1").count() == 1
    assert page.title().startswith("Data updates")

    page.click("[data-studio-page='online'] a")
    expect(page.locator("#studio-page-title")).to_have_text("Online prediction")
    expect(page.locator(".studio-page-view h2").first).to_have_text("Pipelines")

    page.click("[data-studio-page='sync'] a")
    schedules = page.locator("#studio-page-schedules li")
    expect(schedules).to_have_count(2)
    expect(schedules.nth(0).locator("a")).to_have_attribute("href", "#/schedules/close-report")
    expect(schedules.nth(1)).to_contain_text("no such schedule")
    schedules.nth(0).locator("a").click()
    expect(page).to_have_url(paged.url + "/#/schedules/close-report")

    page.click("[data-studio-page='all-schedules'] a")
    expect(page.locator("#schedules-table tr[data-schedule='close-report']")).to_be_visible()

    page.goto(paged.url + "/#/pages/nope")
    expect(page.locator("main h1")).to_have_text("Page not found")
    page.goto(paged.url + "/#/pages/javascript:alert(1)")
    expect(page.locator("main h1")).to_have_text("Page not found")
    assert errors == [], errors


def test_no_pages_no_entries(studio: ServerProcess, page: Any) -> None:
    page.goto(studio.url + "/#/tasks")
    expect(page.locator("#tasks-table, main h1").first).to_be_visible()
    page.wait_for_load_state("networkidle")
    expect(page.locator("nav [data-studio-page]")).to_have_count(0)
