"""The task list: filters, server-side paging, keyboard, live states, narrow window."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect
from studio_support import SEEDED_PAGES, finish, screenshot, submit, task_hash

pytestmark = pytest.mark.browser

ROWS = "#tasks-table tbody tr.row-link"


def test_state_type_and_text_filters(studio, page):
    done = [submit(studio, "demo", x=n, y=1, task_name=f"filter-ok-{n}") for n in range(3)]
    bad = submit(studio, "demo", x=1, y=1, fail=True, task_name="filter-bad")
    for handle in [*done, bad]:
        finish(studio, handle)

    page.goto(studio.url + "/#/tasks")
    expect(page.locator(f"{ROWS}[data-task-id='base#demo#filter-ok-1']")).to_be_visible()

    page.select_option("#filter-state", "failed")
    expect(page.locator(f"{ROWS}[data-task-id='base#demo#filter-bad']")).to_be_visible()
    expect(page.locator(f"{ROWS}:not([data-state='failed'])")).to_have_count(0)
    assert "state=failed" in page.url

    page.select_option("#filter-state", "")
    page.select_option("#filter-type", "base")
    page.fill("#filter-text", "filter-ok-1")
    expect(page.locator(ROWS)).to_have_count(1)
    expect(page.locator(ROWS).first).to_have_attribute("data-task-id", "base#demo#filter-ok-1")

    page.fill("#filter-text", "")
    page.select_option("#filter-type", "inference")
    expect(page.locator("#tasks-table tbody td.empty")).to_contain_text("No tasks match")
    page.select_option("#filter-type", "")
    expect(page.locator("#tasks-summary")).not_to_contain_text("text filter")
    expect(page.locator(f"{ROWS}[data-task-id='base#demo#filter-ok-0']")).to_be_visible()
    assert "q=" not in page.url
    screenshot(page, "tasks")


def test_paging_walks_the_cursor_both_ways(studio, page):
    page.goto(studio.url + "/#/tasks?type=etl&size=25")
    rows = page.locator(ROWS)
    expect(rows).to_have_count(25)
    newest = f"etl#seeded#page-{SEEDED_PAGES - 1:03d}"
    expect(rows.first).to_have_attribute("data-task-id", newest)
    seen = set()
    pages = -(-SEEDED_PAGES // 25)
    for number in range(1, pages + 1):
        expect(page.locator(".pager")).to_contain_text(f"Page {number}")
        expected = min(25, SEEDED_PAGES - (number - 1) * 25)
        expect(rows).to_have_count(expected)
        ids = rows.evaluate_all("rows => rows.map(r => r.dataset.taskId)")
        assert not seen & set(ids)
        seen |= set(ids)
        if number < pages:
            page.get_by_role("button", name="Next →").click()
    assert len(seen) == SEEDED_PAGES
    expect(page.get_by_role("button", name="Next →")).to_be_disabled()
    page.get_by_role("button", name="← Previous").click()
    expect(page.locator(".pager")).to_contain_text(f"Page {pages - 1}")
    expect(rows).to_have_count(25)


def test_rows_open_with_the_keyboard(studio, page):
    finish(studio, submit(studio, "demo", x=1, y=2, task_name="keyboard-row"))
    page.goto(studio.url + "/#/tasks?q=keyboard-row")
    row = page.locator(f"{ROWS}[data-task-id='base#demo#keyboard-row']")
    expect(row).to_be_visible()
    page.locator("#filter-text").focus()
    for _ in range(12):  # search -> page size -> select-all -> sortable headers -> first row
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.dataset.taskId") == "base#demo#keyboard-row":
            break
    expect(row).to_be_focused()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(re.escape(task_hash("base#demo#keyboard-row")) + "$"))
    expect(page.locator("#task-state")).to_contain_text("succeeded")


def test_states_update_live_without_reload(studio, page):
    page.goto(studio.url + "/#/tasks?type=base")
    expect(page.locator("#tasks-summary")).to_contain_text("update live")
    page.evaluate("window.__sameDocument = true")
    handle = submit(studio, "command", command="sleep 3", task_name="live-sleep")
    row = page.locator(f"{ROWS}[data-task-id='{handle['task_id']}']")
    expect(row).to_have_attribute("data-state", re.compile("queued|running"), timeout=10_000)
    expect(row).to_have_attribute("data-state", "succeeded", timeout=15_000)
    assert page.evaluate("window.__sameDocument") is True


def test_narrow_window_has_no_horizontal_scroll(studio, page):
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(studio.url + "/#/tasks")
    expect(page.locator(ROWS).first).to_be_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"page is {width}px wide in a 390px window"
    expect(page.get_by_role("link", name="Submit", exact=True)).to_be_visible()
    screenshot(page, "tasks-narrow")
