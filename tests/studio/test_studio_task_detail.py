"""Task detail: live log, scroll-back windows, failed error, artifacts, cancel/rerun/delete."""

from __future__ import annotations

import hashlib
import re
import struct
import zlib

import pytest
from playwright.sync_api import expect
from studio_support import finish, screenshot, submit, task_hash

pytestmark = pytest.mark.browser


def png_bytes(width: int = 96, height: int = 48) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(
        b"\x00" + b"".join(bytes((255 * x // width, 90, 255 * y // height)) for x in range(width))
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def printf_to(data: bytes, path: str) -> str:
    """A POSIX-sh command writing exactly ``data`` (octal escapes) to ``path``."""
    return "printf '" + "".join(f"\\{byte:03o}" for byte in data) + f"' > {path}"


ARTIFACTS = {
    "data.csv": b'city,temp\nOslo,4\n"Rome, IT",18\n',
    "info.json": b'{"b": [1, 2], "a": "<b>x</b>"}',
    "notes.txt": b'<img src=x onerror="window.__pwned=1">hello & goodbye\n',
    "plots/pixel.png": png_bytes(),
}


def test_log_follows_a_running_task(studio, page):
    script = "for i in $(seq 1 10); do echo tick $i; sleep 0.3; done"
    handle = submit(studio, "command", command=script, shell=True, task_name="log-follow")
    page.goto(studio.url + "/" + task_hash(handle["task_id"]))
    log = page.locator("#task-log")
    expect(log).to_contain_text("tick 2", timeout=10_000)
    expect(page.locator("#task-state")).to_contain_text("running")
    expect(log).to_contain_text("tick 10", timeout=15_000)
    expect(page.locator("#task-state")).to_contain_text("succeeded", timeout=10_000)
    assert log.inner_text().count("tick 5\n") == 1
    bars = page.locator("#task-steps progress")
    expect(bars.first).to_have_attribute("value", "100")
    assert bars.count() >= 1


def test_scroll_back_loads_earlier_windows_without_gaps(studio, page):
    handle = submit(studio, "command", command="seq 1 40000", task_name="long-log")
    finish(studio, handle)
    page.goto(studio.url + "/" + task_hash(handle["task_id"]))
    log = page.locator("#task-log")
    expect(log).to_contain_text("40000")
    earlier = page.locator("#log-earlier")
    expect(earlier).to_be_visible()
    assert "\n1\n" not in "\n" + log.inner_text()
    for _ in range(10):
        if not earlier.is_visible():
            break
        before = len(log.inner_text())
        earlier.click()
        page.wait_for_function(
            "n => document.querySelector('#task-log').textContent.length > n", arg=before
        )
    expect(earlier).to_be_hidden()
    numbers = [int(line) for line in log.inner_text().split("\n") if line.strip().isdigit()]
    assert numbers == list(range(1, 40001))
    expect(page.locator("#log-info")).to_contain_text("bytes 0–")


def test_failed_task_shows_its_error(studio, page):
    handle = submit(studio, "demo", x=1, y=2, fail=True, task_name="shows-error")
    finish(studio, handle)
    page.goto(studio.url + "/" + task_hash(handle["task_id"]))
    error = page.locator("#task-error .alert-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("Demo failure requested")
    expect(page.locator("#task-state")).to_contain_text("failed")
    screenshot(page, "task-failed")


def test_artifacts_preview_and_download(studio, page):
    script = "mkdir -p plots && " + " && ".join(
        printf_to(data, name) for name, data in ARTIFACTS.items()
    )
    handle = submit(studio, "command", command=script, shell=True, task_name="artifacts")
    assert finish(studio, handle)["state"] == "succeeded"
    page.goto(studio.url + "/" + task_hash(handle["task_id"]))
    table = page.locator("#artifact-files")
    for name, data in ARTIFACTS.items():
        row = table.locator(f"tr[data-file='{name}']")
        expect(row).to_be_visible()
        expect(row.locator("code[data-sha256]")).to_have_attribute(
            "data-sha256", hashlib.sha256(data).hexdigest()
        )
    expect(table.locator("tr[data-file='data.csv'] td.num")).to_have_text(
        f"{len(ARTIFACTS['data.csv'])} B"
    )

    table.get_by_role("button", name="Preview data.csv").click()
    preview = page.locator(".preview-table")
    expect(preview.locator("td", has_text="Rome, IT")).to_be_visible()
    expect(preview.locator("th").first).to_have_text("city")

    table.get_by_role("button", name="Preview info.json").click()
    expect(page.locator(".preview-json")).to_contain_text('"a": "<b>x</b>"')

    table.get_by_role("button", name="Preview notes.txt").click()
    text = page.locator(".preview-text")
    expect(text).to_contain_text('<img src=x onerror="window.__pwned=1">hello & goodbye')
    assert page.locator(".preview img").count() == 0
    assert page.evaluate("window.__pwned") is None

    table.get_by_role("button", name="Preview plots/pixel.png").click()
    image = page.locator("img.preview-image")
    expect(image).to_be_visible()
    page.wait_for_function("() => document.querySelector('img.preview-image').naturalWidth === 96")
    screenshot(page, "task-detail")

    command = page.locator("#sec-configuration ~ table tr", has_text="command")
    command.get_by_role("button", name=re.compile("Show all")).click()
    expect(command.locator("td")).to_contain_text("> plots/pixel.png")

    with page.expect_download() as download_info:
        table.get_by_role("button", name="Download data.csv").click()
    download = download_info.value
    assert download.suggested_filename == "data.csv"
    with open(download.path(), "rb") as fh:
        assert fh.read() == ARTIFACTS["data.csv"]


def test_cancel_then_rerun_then_delete(studio, page):
    handle = submit(studio, "command", command="sleep 60", task_name="cancel-me")
    page.goto(studio.url + "/" + task_hash(handle["task_id"]))
    expect(page.locator("#task-state")).to_contain_text(re.compile("queued|running"))
    page.locator("#task-cancel").click()
    dialog = page.locator("#confirm-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#confirm-cancel")).to_be_focused()
    page.locator("#confirm-ok").click()
    try:
        expect(page.locator("#task-state")).to_contain_text("cancelled", timeout=20_000)
    except AssertionError:
        for st in studio.call("list_task_statuses")["answer"]:
            if st["state"] in ("queued", "running"):
                print("ACTIVE", st["task_id"], st["state"], st["created_at"], st["started_at"])
        print("".join(studio.output)[-4000:])
        raise
    expect(page.locator("#task-error")).to_contain_text("Cancelled")

    # declining the confirmation leaves the task alone
    page.locator("#task-delete").click()
    page.locator("#confirm-cancel").click()
    assert studio.call("status", task_id=handle["task_id"])["success"]

    page.locator("#task-rerun").click()
    page.locator("#confirm-ok").click()
    expect(page.locator("#task-cancel")).to_be_visible(timeout=10_000)
    status = studio.call("status", task_id=handle["task_id"])["answer"]
    assert status["run_id"] != handle["run_id"]
    page.locator("#task-cancel").click()
    page.locator("#confirm-ok").click()
    expect(page.locator("#task-state")).to_contain_text("cancelled", timeout=20_000)

    page.locator("#task-delete").click()
    page.locator("#confirm-ok").click()
    expect(page).to_have_url(re.compile(r"#/tasks$"))
    assert not studio.call("status", task_id=handle["task_id"])["success"]


def test_a_waiting_task_shows_what_it_waits_for(studio, page):
    """A task submitted with depends_on shows its upstreams as links while it waits, and
    runs once they succeeded."""
    up = submit(studio, "command", command="while [ ! -e go ]; do sleep 0.05; done",
                shell=True, task_name="detail-up")
    down = submit(studio, "demo", x=1, y=2, task_name="detail-down", depends_on=[up["task_id"]])
    page.goto(studio.url + "/" + task_hash(down["task_id"]))
    waiting = page.locator("#task-waiting-for a")
    expect(waiting).to_have_text(up["task_id"])
    expect(page.locator("#task-state")).to_contain_text("queued")
    (studio.workspace / "base" / up["task_id"] / "go").touch()
    expect(page.locator("#task-state")).to_contain_text("succeeded", timeout=15_000)
    expect(page.locator("#task-waiting-for")).to_have_count(0)
