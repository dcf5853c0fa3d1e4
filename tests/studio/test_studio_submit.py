"""Submit: a form generated from the input schema, with inline client and server errors."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect
from studio_support import console_errors, finish, screenshot, task_hash

pytestmark = pytest.mark.browser


def task_ids(server) -> set[str]:
    return set(server.call("list_task_ids")["answer"])


def test_form_shows_client_and_server_errors_inline(studio, page):
    page.goto(studio.url + "/#/submit?task=demo")
    expect(page.locator("#definition")).to_have_value("demo")
    expect(page.locator(".definition-description")).to_contain_text("arithmetic")
    for field in ("x", "y", "fail", "task_name", "source_tasks"):
        expect(page.locator(f"#in-{field}")).to_be_visible()
    expect(page.locator("#in-fail")).to_have_attribute("type", "checkbox")

    before = task_ids(studio)
    page.fill("#in-y", "abc")
    page.click("#submit-task")
    expect(page.locator("#in-x-error")).to_have_text("Required.")
    expect(page.locator("#in-y-error")).to_have_text("Enter a whole number.")
    expect(page.locator("#in-x")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#in-x")).to_be_focused()
    expect(page.locator("#form-errors")).to_be_visible()
    assert task_ids(studio) == before

    page.fill("#in-x", "2")
    page.fill("#in-y", "3")
    page.fill("#in-task_name", "bad name!")
    page.click("#submit-task")
    name_error = page.locator("#in-task_name-error")
    expect(name_error).to_be_visible()
    expect(name_error).not_to_be_empty()
    expect(page.locator("#in-task_name")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#in-x-error")).to_be_hidden()
    assert task_ids(studio) == before
    screenshot(page, "submit")

    page.fill("#in-task_name", "form-ok")
    page.click("#submit-task")
    expect(page).to_have_url(re.compile(re.escape(task_hash("base#demo#form-ok")) + "$"))
    expect(page.locator("#task-state")).to_contain_text("succeeded", timeout=15_000)
    expect(page.locator("#sec-result + pre, .json").first).to_contain_text('"result": 5')


def test_schema_kinds_become_matching_controls(studio, page):
    page.goto(studio.url + "/#/submit")
    page.select_option("#definition", "command")
    expect(page.locator("#in-command")).to_be_visible()
    expect(page.locator("#in-shell")).to_have_attribute("type", "checkbox")
    expect(page.locator("#in-artifacts")).to_have_value("**/*")
    expect(page.locator("#in-timeout_seconds")).to_have_attribute("inputmode", "decimal")
    page.fill("#in-command", "true")
    page.fill("#in-timeout_seconds", "0")
    page.click("#submit-task")
    expect(page.locator("#in-timeout_seconds-error")).to_have_text("Must be greater than 0.")
    page.fill("#in-timeout_seconds", "")
    page.fill("#in-task_name", "schema-kinds")
    page.click("#submit-task")
    expect(page).to_have_url(re.compile(re.escape(task_hash("base#command#schema-kinds")) + "$"))
    status = studio.call("status", task_id="base#command#schema-kinds")["answer"]
    assert status["config"]["artifacts"] == "**/*"
    assert status["config"]["shell"] is False


def test_edit_and_submit_prefills_from_a_task(studio, page):
    reply = studio.call("submit", task="demo", x=7, y=8, task_name="prefill-src")
    task_id = reply["answer"]["task_id"]
    page.goto(studio.url + "/" + task_hash(task_id))
    page.get_by_role("link", name="Edit & submit").click()
    expect(page.locator("#in-x")).to_have_value("7")
    expect(page.locator("#in-y")).to_have_value("8")
    expect(page.locator("#in-task_name")).to_have_value("prefill-src")


def test_source_tasks_are_picked_by_search_or_typed(studio, page):
    errors = console_errors(page)
    made = {}
    for name in ("pickme-alpha", "pickme-beta"):
        handle = studio.call("submit", task="demo", x=1, y=2, task_name=name)["answer"]
        finish(studio, handle)
        made[name] = handle["task_id"]
    typed = studio.call("submit", task="demo", x=3, y=4, task_name="typed-up")["answer"]
    finish(studio, typed)
    page.goto(studio.url + "/#/submit?task=demo")
    field = page.locator("#in-source_tasks")
    field.fill(typed["task_id"])  # a full id typed by hand still counts
    search = page.locator("#in-source_tasks-search")
    search.fill("pickme")
    matches = page.locator("#in-source_tasks-matches .picker-option")
    expect(matches).to_have_count(2)
    expect(matches.first).to_contain_text("pickme-beta")  # newest first
    matches.filter(has_text="pickme-alpha").click()
    matches.filter(has_text="pickme-alpha").click()  # a second choice adds nothing
    expect(field).to_have_value(f"{typed['task_id']}, {made['pickme-alpha']}")
    search.fill("pickme-beta")
    expect(matches).to_have_count(1)
    matches.first.click()
    expect(field).to_have_value(
        f"{typed['task_id']}, {made['pickme-alpha']}, {made['pickme-beta']}"
    )
    search.fill("no-task-is-called-this")
    expect(page.locator("#in-source_tasks-search ~ .picker-status")).to_contain_text("No task")
    expect(matches).to_have_count(0)
    screenshot(page, "submit-source-picker")

    page.fill("#in-x", "1")
    page.fill("#in-y", "1")
    page.fill("#in-task_name", "picked-downstream")
    page.click("#submit-task")
    expect(page.locator("#task-state")).to_contain_text("succeeded", timeout=15_000)
    config = studio.call("status", task_id="base#demo#picked-downstream")["answer"]["config"]
    assert [s.strip() for s in config["source_tasks"].split(",")] == [
        typed["task_id"], made["pickme-alpha"], made["pickme-beta"],
    ]  # fmt: skip
    assert errors == []
