"""Agent sessions: create, upload by drag and drop, run with a prompt, live events, output
files, close and reopen; the list's run count and latest run state."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect
from studio_support import screenshot

pytestmark = pytest.mark.browser

DROP_FILE = """() => {
  const transfer = new DataTransfer();
  transfer.items.add(new File(["alpha\\nbeta\\n"], "notes.txt", { type: "text/plain" }));
  return transfer;
}"""


def test_session_upload_run_and_outputs(studio, page):
    page.goto(studio.url + "/#/sessions")
    page.fill("#session-title", "Quarterly <b>numbers</b>")
    page.click("#session-create")
    expect(page).to_have_url(re.compile(r"#/sessions/[^/?]+$"))
    expect(page.locator("h1")).to_have_text("Quarterly <b>numbers</b>")
    expect(page.locator("#session-status")).to_contain_text("open")

    transfer = page.evaluate_handle(DROP_FILE)
    page.dispatch_event("#dropzone", "dragenter", {"dataTransfer": transfer})
    expect(page.locator("#dropzone")).to_have_class(re.compile("is-over"))
    page.dispatch_event("#dropzone", "drop", {"dataTransfer": transfer})
    files = page.locator("#session-files")
    expect(files.locator("tr[data-file='notes.txt']")).to_be_visible()
    page.set_input_files(
        "#upload-input",
        files=[{"name": "table.csv", "mimeType": "text/csv", "buffer": b"a,b\n1,2\n"}],
    )
    expect(files.locator("tr[data-file='table.csv']")).to_be_visible()
    files.get_by_role("button", name="Preview table.csv").click()
    expect(files.locator(".preview-table td", has_text="2")).to_be_visible()
    expect(page.locator("#attach-list input[type=checkbox]:checked")).to_have_count(2)

    page.click("#start-run")
    expect(page.locator("#prompt-error")).to_have_text("Write a prompt first.")
    page.fill("#prompt", "Summarise my notes")
    page.click("#start-run")
    expect(page.locator("#chat .msg-user").last).to_contain_text("Summarise my notes")
    expect(page.locator("#runs-table tbody tr")).to_have_count(1)
    expect(page.locator("#run-events")).to_contain_text("running", timeout=30_000)
    outputs = page.locator("#run-output-files")
    expect(outputs.locator("tr[data-file='final-answer.md']")).to_be_visible(timeout=60_000)
    expect(page.locator("#runs-table tbody tr").first).to_contain_text("succeeded")
    expect(page.locator("#chat .msg-assistant")).not_to_have_count(0)
    outputs.get_by_role("button", name="Preview final-answer.md").click()
    expect(outputs.locator(".preview-text")).not_to_be_empty()
    screenshot(page, "session")

    page.click("#session-toggle")
    page.click("#confirm-ok")
    expect(page.locator("#session-status")).to_contain_text("closed")
    expect(page.locator("#closed-note")).to_be_visible()
    expect(page.locator("#prompt")).to_be_disabled()
    expect(page.locator("#upload-choose")).to_be_disabled()
    page.click("#session-toggle")
    expect(page.locator("#session-status")).to_contain_text("open")
    expect(page.locator("#prompt")).to_be_enabled()

    with studio.client() as client:  # a session that never ran, beside it
        assert client.post("/api/v1/sessions", json={"title": "Never ran"}).status_code == 201
    page.get_by_role("link", name="Sessions", exact=True).first.click()
    row = page.locator("#sessions-table tbody tr.row-link", has_text="Quarterly <b>numbers</b>")
    expect(row).to_be_visible()
    expect(row.locator("td[data-col='runs']")).to_have_text("1")
    expect(row.locator("td[data-col='latest-run'] .badge")).to_have_text("succeeded")
    expect(row).to_have_attribute("aria-label", re.compile(r", 1 run, latest succeeded$"))
    idle = page.locator("#sessions-table tbody tr.row-link", has_text="Never ran")
    expect(idle.locator("td[data-col='runs']")).to_have_text("0")
    expect(idle.locator("td[data-col='latest-run']")).to_have_text("—")
    screenshot(page, "sessions")
