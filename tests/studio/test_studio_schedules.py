"""The Schedules page in Chromium: a configured schedule listed, one made by the form (a bad
cron refused with the server's message), triggered, its history page with the run's link,
paused and resumed, deleted."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect
from studio_support import screenshot, sign_in_by_link

from serverproc import ServerProcess, start_server

pytestmark = pytest.mark.browser

CONFIG = {
    "schedules": {
        "close-report": {"job": "demo", "cron": "0 16 * * 1-5", "timezone": "Europe/Berlin",
                         "arguments": {"x": 1, "y": 2}, "description": "After the close"},
    }
}  # fmt: skip


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("studio-schedules"), config=CONFIG)
    try:
        yield server
    finally:
        server.stop()


def test_schedules_page(scheduled: ServerProcess, page: Any) -> None:
    sign_in_by_link(page, scheduled)
    page.goto(scheduled.url + "/#/schedules")
    table = page.locator("#schedules-table")
    configured = table.locator("tr[data-schedule='close-report']")
    expect(configured).to_contain_text("0 16 * * 1-5")
    expect(configured).to_contain_text("Europe/Berlin")
    expect(configured.locator("[data-field='last']")).to_have_text("never")
    expect(page.locator("a[data-nav='schedules']")).to_have_attribute("aria-current", "page")

    page.fill("#schedule-name", "minutely-sum")
    page.fill("#schedule-task", "demo")
    page.fill("#schedule-cron", "61 * * * *")
    page.fill("#schedule-arguments", '{"x": 20, "y": 22}')
    page.click("#schedule-create")
    expect(page.locator(".alert-error")).to_contain_text("Invalid cron expression")
    expect(table.locator("tr[data-schedule='minutely-sum']")).to_have_count(0)
    page.fill("#schedule-cron", "0 0 1 1 *")
    page.click("#schedule-create")
    made = table.locator("tr[data-schedule='minutely-sum']")
    expect(made).to_be_visible()

    made.locator("[data-action='trigger']").click()
    expect(made.locator("[data-field='last']")).to_have_text("submitted")
    made.locator("[data-action='pause']").click()
    expect(made.locator("[data-field='next']")).to_have_text("paused")
    made.locator("[data-action='resume']").click()
    expect(made.locator("[data-field='next']")).not_to_have_text("paused")

    made.locator("a").click()
    expect(page).to_have_url(re.compile(r"#/schedules/minutely-sum$"))
    history = page.locator("#schedule-history tbody tr")
    expect(history).to_have_count(1)
    expect(history.first).to_contain_text("trigger")
    task_link = history.first.locator("a")
    expect(task_link).to_have_text(re.compile(r"^base#demo#"))
    screenshot(page, "schedule")
    page.click("#schedule-delete")
    page.click("#confirm-ok")
    expect(page).to_have_url(re.compile(r"#/schedules$"))
    expect(table.locator("tr[data-schedule='minutely-sum']")).to_have_count(0)
    expect(table.locator("tr[data-schedule='close-report']")).to_be_visible()
