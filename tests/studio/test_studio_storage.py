"""A server short of disk space says so in the Studio, on every page, without a token."""

from __future__ import annotations

import shutil

import pytest
from playwright.sync_api import expect
from studio_support import screenshot, sign_in_by_link

from serverproc import start_server

pytestmark = pytest.mark.browser


def test_low_disk_space_shows_a_banner_and_refuses_new_work(tmp_path, page):
    free_mb = shutil.disk_usage(tmp_path).free // (1 << 20)
    server = start_server(tmp_path / "low", config={"min_free_mb": free_mb + 10_000})
    try:
        sign_in_by_link(page, server)
        page.goto(server.url + "/#/tasks")
        banner = page.locator("#storage-banner")
        expect(banner).to_be_visible()
        expect(banner).to_contain_text("nearly full")
        expect(banner).to_contain_text(f"{free_mb + 10_000} MB")
        screenshot(page, "storage-banner", full_page=False)
        with server.client() as client:
            reply = client.post("/jobs/submit", json={"arguments": {"task": "demo", "x": 1, "y": 2}})
        assert reply.status_code == 507, reply.text
    finally:
        server.stop()


def test_no_banner_with_room_to_spare(studio, page):
    page.goto(studio.url + "/#/tasks")
    expect(page.locator("tr[data-task-id]").first).to_be_visible()
    page.wait_for_function("fetch('health').then(r => r.ok)")  # the banner's own check ran too
    expect(page.locator("#storage-banner")).to_be_hidden()
