"""The task page's run list opens a view of each run, an earlier one a rerun replaced too:
its params, result, files (downloaded by run id, byte-equal) and log, in Chromium with no
console error; a hostile file name or log line stays text."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect
from studio_support import finish, screenshot, sign_in_by_link, submit, task_hash

from serverproc import ServerProcess, start_server

HOSTILE = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("studio-run-view"))
    try:
        yield server
    finally:
        server.stop()


def run(own: ServerProcess, word: str) -> dict[str, Any]:
    command = (
        f"echo 'said {word} {HOSTILE}'; echo {word} > note.txt; "
        "head -c 70000 /dev/zero | tr '\\0' 'w' > weights.bin"
    )
    final = finish(own, submit(own, "command", command=command, shell=True, task_name="viewed",
                               timeout_seconds=10 if word == "one" else 20))  # fmt: skip
    assert final["state"] == "succeeded", final
    return final


def test_an_earlier_run_opens_with_its_params_result_files_and_log(
    own: ServerProcess, page: Any, tmp_path: Path
) -> None:
    first = run(own, "one")
    second = run(own, "two")
    sign_in_by_link(page, own)
    page.goto(own.url + "/" + task_hash(second["task_id"]))
    earlier = page.locator(f"#runs-history tr[data-run-id='{first['run_id']}']")
    earlier.locator("button.run-view").click()
    view = page.locator(f"#run-detail-{first['run_id']}")
    expect(view.locator("tr[data-param='timeout_seconds'] td").nth(1)).to_have_text("10")
    expect(view.locator(".run-result")).to_contain_text('"exit_code": 0')
    expect(view.locator(".run-log")).to_contain_text(f"said one {HOSTILE}")
    assert view.locator("img").count() == 0
    files = view.locator(".files-table tbody tr")
    expect(files.filter(has_text="note.txt")).to_have_count(1)
    row = files.filter(has_text="weights.bin")
    with page.expect_download() as info:
        row.get_by_role("button", name="Download weights.bin").click()
    saved = tmp_path / "weights.bin"
    info.value.save_as(saved)
    assert saved.read_bytes() == b"w" * 70000
    with page.expect_download() as info:
        files.filter(has_text="note.txt").get_by_role("button", name="Download note.txt").click()
    info.value.save_as(tmp_path / "note.txt")
    assert (tmp_path / "note.txt").read_text() == "one\n"  # run 1's, not the current run's
    screenshot(page, "task-run-view")
    earlier.locator("button.run-view").click()  # hides it again
    expect(view).to_have_count(0)
