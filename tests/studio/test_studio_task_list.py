"""The task list on its own server: server-side sort and total, the definition filter, bulk
cancel and delete with a confirm step, relative times with the zone on hover, a phone-sized
window, a failed task's files and error on its page; and an agent's answer rendered as
sanitised Markdown."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect
from studio_support import finish, screenshot, sign_in_by_link, submit, task_hash

from runyard.workspace.atomic import write_json_atomic
from runyard.workspace.layout import Workspace
from serverproc import ServerProcess, start_server

pytestmark = pytest.mark.browser

ROWS = "#tasks-table tbody tr.row-link"
FINAL = ("succeeded", "failed", "cancelled")
SEEDED = 6  # etl#sorted#s-0..5: durations 6, 5, 4, 3, 2, 1 minutes (oldest runs longest)


def seed(workspace: Path) -> None:
    ws = Workspace.open(workspace, workspace.parent / "logs")
    ws.ensure()
    for n in range(SEEDED):
        task_id = f"etl#sorted#s-{n}"
        folder = ws.task_dir(task_id)
        folder.mkdir(parents=True)
        start = f"2026-03-01T08:{n:02d}:00.000000Z"
        record = {
            "task_id": task_id, "run_id": f"{n:032x}", "task_type": "etl", "task_name": "sorted",
            "state": "succeeded", "config": {"task_name": f"s-{n}", "source_tasks": ""},
            "created_at": start, "started_at": start,
            "finished_at": f"2026-03-01T08:{SEEDED:02d}:00.000000Z",  # all end together
            "pid": None, "exit_code": 0, "error": "", "result": {}, "steps": [], "log_path": "",
        }  # fmt: skip
        write_json_atomic(folder / "status.json", record, fsync=False)


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server of this module's own: its tests change and count tasks."""
    root = tmp_path_factory.mktemp("studio-task-list")
    seed(root / "ws")
    server = start_server(root, config={"max_concurrent_tasks": 4})
    try:
        yield server
    finally:
        server.stop()


def ids(page: Any) -> list[str]:
    found: list[str] = page.locator(ROWS).evaluate_all("rows => rows.map(r => r.dataset.taskId)")
    return found


def test_sort_total_definition_filter_and_times(own: ServerProcess, page: Any) -> None:
    sign_in_by_link(page, own)
    page.goto(own.url + "/#/tasks?task=sorted&size=25")
    expect(page.locator(ROWS)).to_have_count(SEEDED)
    expect(page.locator("#tasks-summary")).to_contain_text(f"{SEEDED} tasks matching")
    expect(page.locator("#filter-task")).to_have_value("sorted")
    expect(page.locator("#filter-task option[value='demo']")).to_have_count(1)  # definitions
    duration = page.locator("th button[data-sort='duration']")
    duration.click()  # first click: longest first
    expect(page.locator("th[aria-sort='descending'] button[data-sort='duration']")).to_be_visible()
    expect(page).to_have_url(re.compile(r"sort=duration&order=desc"))
    expect(page.locator(ROWS).first).to_have_attribute("data-task-id", "etl#sorted#s-0")
    assert ids(page) == [f"etl#sorted#s-{n}" for n in range(SEEDED)]
    duration.click()
    expect(page.locator(ROWS).first).to_have_attribute("data-task-id", f"etl#sorted#s-{SEEDED - 1}")
    page.goto(own.url + "/#/tasks?task=sorted&sort=duration&order=asc&size=25")
    expect(page.locator(ROWS).first).to_have_attribute("data-task-id", f"etl#sorted#s-{SEEDED - 1}")
    expect(page.locator(".pager")).to_contain_text("Page 1 of 1")

    created = page.locator(f"{ROWS}[data-task-id='etl#sorted#s-0'] time")
    expect(created).to_have_text(re.compile(r"^\d+ (s|min|h|d|mo|y) ago$"))
    expect(created).to_have_attribute(
        "title", re.compile(r"^2026-03-01 \d\d:00:00 UTC[+-]\d\d:\d\d")
    )
    expect(created).to_have_attribute("datetime", "2026-03-01T08:00:00.000000Z")

    page.select_option("#filter-task", "")
    page.select_option("#filter-type", "inference")
    expect(page.locator("#tasks-table td.empty")).to_contain_text("No tasks match")
    expect(page.locator("#tasks-summary")).to_contain_text("0 tasks matching")


def test_phone_keeps_time_and_duration(own: ServerProcess, page: Any) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in_by_link(page, own)
    page.goto(own.url + "/#/tasks?task=sorted")
    expect(page.locator(ROWS)).to_have_count(SEEDED)
    for label in ("State", "Name", "Created", "Duration"):
        header = page.locator(f"#tasks-table thead th:has(button:text-is('{label}'))")
        expect(header).to_be_visible()
    row = page.locator(ROWS).first
    expect(row.locator("td.col-time").first.locator("time")).to_be_visible()
    expect(row.locator("td.col-time").nth(1)).to_have_text(re.compile(r"\d+ min"))
    # nothing sticks out of the window, and the table itself needs no sideways scroll
    assert page.evaluate("document.body.scrollWidth") <= 390
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    wrap = page.locator("#tasks-table").locator("xpath=..")
    assert wrap.evaluate("w => w.scrollWidth <= w.clientWidth"), "the table scrolls sideways"
    screenshot(page, "tasks-phone")


def test_bulk_cancel_then_delete(own: ServerProcess, page: Any) -> None:
    sleepers = [
        submit(own, "command", command="sleep 60", task_name=f"bulk-run-{n}") for n in range(2)
    ]
    done = finish(own, submit(own, "demo", x=1, y=1, task_name="bulk-done"))
    assert done["state"] == "succeeded"
    sign_in_by_link(page, own)
    page.goto(own.url + "/#/tasks?type=base&size=25")
    for task_id in [h["task_id"] for h in sleepers] + [done["task_id"]]:
        expect(page.locator(f"{ROWS}[data-task-id='{task_id}']")).to_be_visible()
    expect(page.locator(".bulk-bar")).to_be_hidden()
    page.check("#select-page")
    expect(page.locator(".bulk-bar")).to_be_visible()
    expect(page.locator("#bulk-count")).to_have_text("3 tasks selected")

    # delete: the running ones are refused by name, the finished one goes after a confirm
    page.click("#bulk-delete")
    expect(page.locator("#confirm-text")).to_contain_text(
        "2 selected tasks are still queued or running"
    )
    page.click("#confirm-cancel")  # the confirm step: nothing happens without it
    expect(page.locator(f"{ROWS}[data-task-id='{done['task_id']}']")).to_be_visible()
    page.click("#bulk-delete")
    page.click("#confirm-ok")
    report = page.locator("#bulk-report")
    expect(report).to_contain_text("Deleted 1 of 3 tasks.")
    for handle in sleepers:
        item = report.locator(f"li[data-task-id='{handle['task_id']}']")
        expect(item).to_have_attribute("data-ok", "false")
        expect(item).to_contain_text(
            re.compile(r"not deleted: it is (queued|running); cancel it first")
        )
    expect(report.locator(f"li[data-task-id='{done['task_id']}']")).to_contain_text("deleted")
    expect(page.locator(f"{ROWS}[data-task-id='{done['task_id']}']")).to_have_count(0)
    assert own.call("status", task_id=done["task_id"])["success"] is False

    # cancel: every selected running task is stopped
    for handle in sleepers:
        page.check(f"{ROWS}[data-task-id='{handle['task_id']}'] input.row-check")
    expect(page.locator("#bulk-count")).to_have_text("2 tasks selected")
    page.click("#bulk-cancel")
    expect(page.locator("#confirm-title")).to_have_text("Cancel 2 tasks?")
    page.click("#confirm-ok")
    expect(report).to_contain_text("Cancelled 2 of 2 tasks.")
    for handle in sleepers:
        row = page.locator(f"{ROWS}[data-task-id='{handle['task_id']}']")
        expect(row).to_have_attribute("data-state", "cancelled", timeout=20_000)
        assert finish(own, handle)["state"] == "cancelled"
    screenshot(page, "tasks-bulk")


def test_failed_task_shows_its_files_and_error(own: ServerProcess, page: Any) -> None:
    command = "mkdir -p out && echo partial > out/partial.txt && echo 'disk on fire' >&2 && exit 3"
    handle = submit(own, "command", command=command, shell=True, task_name="broken")
    final = finish(own, handle)
    assert final["state"] == "failed", final
    sign_in_by_link(page, own)
    page.goto(own.url + "/" + task_hash(handle["task_id"]))
    expect(page.locator("#task-state")).to_contain_text("failed")
    files = page.locator("#artifact-files")
    expect(files.locator("tr[data-file='out/partial.txt']")).to_be_visible()
    expect(files.locator("tr[data-file='status.json']")).to_have_count(0)
    expect(page.locator("#left-files-note")).to_contain_text("files it left")
    files.get_by_role("button", name="Preview out/partial.txt").click()
    expect(files.locator(".preview-text")).to_contain_text("partial")
    result = page.locator("#task-result-error")
    expect(result).to_contain_text("failed (exit code 3)")
    expect(result.locator(".error-text")).not_to_be_empty()
    assert "No result yet." not in page.locator("main").inner_text()
    screenshot(page, "task-failed")


HOSTILE_PROMPT = (
    "sums <img src=x onerror=alert(1)> <script>alert(2)</script> "
    "[click](javascript:alert(3)) **bold** `code`"
)


def test_agent_answer_is_markdown_rendered_inert(own: ServerProcess, page: Any) -> None:
    """The reference agent's answer repeats the prompt in its heading: the prompt's HTML and
    javascript: link stay inert text, its Markdown (and the answer's list) become elements."""
    with httpx.Client(base_url=own.url + "/api/v1", headers=own.headers, timeout=60) as client:
        session = client.post("/sessions", json={"title": "answers"}).json()["id"]
        run = client.post("/runs", json={"sessionId": session, "userPrompt": HOSTILE_PROMPT})
        assert run.status_code == 201, run.text
        run_id = run.json()["id"]
        deadline = time.monotonic() + 90
        while client.get(f"/runs/{run_id}").json()["state"] not in FINAL:
            assert time.monotonic() < deadline, "the run did not finish"
            time.sleep(0.1)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    sign_in_by_link(page, own)
    page.goto(f"{own.url}/#/sessions/{session}")
    answer = page.locator("#chat .msg-assistant .msg-body.markdown")
    expect(answer.locator("h1")).to_contain_text("Answer to: sums <img src=x onerror=alert(1)>")
    expect(answer.locator("h1")).to_contain_text("<script>alert(2)</script>")
    expect(answer.locator("h1 strong")).to_have_text("bold")
    expect(answer.locator("h1 code")).to_have_text("code")
    expect(answer.locator("ul > li").first).to_contain_text(f"Run {run_id}")
    assert answer.locator("img, script, iframe, [onerror]").count() == 0
    assert answer.locator("a[href^='javascript']").count() == 0
    expect(answer.locator(".md-link")).to_have_text("click")
    user = page.locator("#chat .msg-user .msg-body")  # what a person typed stays plain text
    expect(user).to_have_text(HOSTILE_PROMPT)
    assert (
        dialogs == []
        and page.evaluate("document.querySelectorAll('script:not([src])').length") == 0
    )


def test_runs_section_lists_the_current_and_the_replaced_run(own: ServerProcess, page: Any) -> None:
    first = finish(own, submit(own, "demo", x=1, y=1, fail=True, task_name="twice"))
    second = finish(own, submit(own, "demo", x=2, y=2, task_name="twice"))
    assert (first["state"], second["state"]) == ("failed", "succeeded")
    assert first["task_id"] == second["task_id"] and first["run_id"] != second["run_id"]
    sign_in_by_link(page, own)
    page.goto(own.url + "/" + task_hash(second["task_id"]))
    rows = page.locator("#runs-history tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator("#runs-summary")).to_contain_text("1 earlier run")
    current, earlier = rows.nth(0), rows.nth(1)
    expect(current).to_have_attribute("data-run-id", second["run_id"])
    expect(current).to_have_attribute("data-current", "true")
    expect(current.locator("code")).to_have_text(second["run_id"])  # the full id, not cut
    expect(current.locator(".badge.state-succeeded")).to_be_visible()
    expect(earlier).to_have_attribute("data-run-id", first["run_id"])
    expect(earlier.locator(".badge.state-failed")).to_be_visible()
    expect(earlier.locator(".run-error")).to_have_attribute("title", first["error"])
    expect(earlier.locator("time")).to_have_attribute("title", re.compile(r"UTC[+-]\d\d:\d\d"))
    screenshot(page, "task-runs")
