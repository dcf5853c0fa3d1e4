"""The task page as it opens: a task's single Markdown or image artifact previewed at once,
relative times that tick, and a task not listed yet waited for (an unknown one still ends
"Task not found") — in a real Chromium against a real server."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from playwright.sync_api import expect
from studio_support import console_errors, finish, submit, task_hash
from test_studio_task_detail import png_bytes, printf_to

from runyard.workspace.atomic import write_json_atomic
from runyard.workspace.layout import Workspace
from serverproc import ServerProcess

pytestmark = pytest.mark.browser


def artifacts_task(studio: ServerProcess, name: str, files: dict[str, bytes]) -> str:
    script = "mkdir -p plots && " + " && ".join(
        printf_to(data, path) for path, data in files.items()
    )
    handle = submit(studio, "command", command=script, shell=True, task_name=name)
    assert finish(studio, handle)["state"] == "succeeded"
    return str(handle["task_id"])


def test_a_single_image_artifact_is_previewed_at_once(studio: ServerProcess, page: Any) -> None:
    errors = console_errors(page)
    task = artifacts_task(
        studio, "one-image", {"data.csv": b"a,b\n1,2\n", "plots/p.png": png_bytes()}
    )
    page.goto(studio.url + "/" + task_hash(task))
    files = page.locator("#artifact-files")
    expect(files.locator(".preview-title")).to_have_text("Preview: plots/p.png")
    page.wait_for_function(
        "() => document.querySelector('#artifact-files img.preview-image')?.naturalWidth === 96"
    )
    assert errors == []


def test_two_images_open_nothing_until_asked(studio: ServerProcess, page: Any) -> None:
    errors = console_errors(page)
    two = {"a.png": png_bytes(), "b.png": png_bytes()}
    task = artifacts_task(studio, "two-images", two)
    page.goto(studio.url + "/" + task_hash(task))
    files = page.locator("#artifact-files")
    expect(files.locator("tr[data-file='b.png']")).to_be_visible()
    page.wait_for_timeout(500)
    expect(files.locator(".preview")).to_be_hidden()
    files.get_by_role("button", name="Preview b.png").click()
    expect(files.locator(".preview-title")).to_have_text("Preview: b.png")
    assert errors == []


def test_which_file_opens_at_once(static_studio: str, page: Any) -> None:
    page.goto(static_studio + "/#/nowhere")
    page.wait_for_selector("h1")
    chosen = page.evaluate(
        """async () => {
          const { singlePreview } = await import('/js/views/files.js');
          const f = (path) => ({ name: path, path, url: '/api/v1/tasks/t/files/' + path });
          const pick = (paths) => singlePreview(paths.map(f))?.file.path ?? null;
          return [
            pick(['report.md', 'figures/a.png', 'figures/b.png', 'data.parquet']),
            pick(['x.csv', 'plot.PNG']),
            pick(['a.md', 'b.markdown', 'c.png']),
            pick(['a.png', 'b.jpg']),
            pick(['notes.txt', 'data.json']),
            pick([]),
          ];
        }"""
    )
    assert chosen == ["report.md", "plot.PNG", None, None, None, None]


def test_started_ticks_every_second(studio: ServerProcess, page: Any) -> None:
    errors = console_errors(page)
    handle = submit(studio, "command", command="sleep 30", task_name="ticking")
    try:
        page.goto(studio.url + "/" + task_hash(handle["task_id"]))
        expect(page.locator("#task-state")).to_contain_text("running", timeout=15_000)
        started = page.locator("dl.facts dt:text-is('Started') + dd time")
        expect(started).to_have_text(re.compile(r"^\d+ s ago$"), timeout=10_000)
        first = started.inner_text()
        # two seconds later it says so, with no reload and no new status
        expect(started).not_to_have_text(first, timeout=2_500)
        assert int(started.inner_text().split()[0]) > int(first.split()[0])
    finally:
        studio.call("cancel", task_id=handle["task_id"])
    assert errors == []


def write_finished_task(studio: ServerProcess, task_id: str) -> None:
    """A finished task's record written straight into the server's workspace, as one that
    another process made would appear."""
    ws = Workspace.open(studio.workspace, studio.workspace.parent / "logs")
    folder = ws.task_dir(task_id)
    folder.mkdir(parents=True)
    stamp = "2026-01-02T00:00:00.000000Z"
    write_json_atomic(
        folder / "status.json",
        {
            "task_id": task_id,
            "run_id": "f" * 32,
            "task_type": task_id.split("#")[0],
            "task_name": task_id.split("#")[1],
            "state": "succeeded",
            "config": {"task_name": task_id.rsplit("#", 1)[1]},
            "created_at": stamp,
            "started_at": stamp,
            "finished_at": stamp,
            "pid": None,
            "exit_code": 0,
            "error": "",
            "result": {},
            "steps": [],
            "log_path": "",
        },
    )


def test_a_task_not_listed_yet_is_waited_for(studio: ServerProcess, page: Any) -> None:
    errors = console_errors(page)
    # a type and task of its own: the shared server's etl and inference listings are counted
    # by other tests
    task_id = f"predict#opened_late#late-{time.monotonic_ns()}"
    page.goto(studio.url + "/" + task_hash(task_id))
    expect(page.locator("#task-waiting")).to_contain_text("Waiting for the task")
    time.sleep(1.5)  # two or three answers of "no status" by now
    write_finished_task(studio, task_id)
    expect(page.locator("#task-state")).to_contain_text("succeeded", timeout=10_000)
    expect(page.locator("code.task-id")).to_have_text(task_id)
    expect(page.get_by_role("heading", name="Task not found")).to_have_count(0)
    assert errors == []


def test_an_unknown_task_is_not_found_after_a_bounded_wait(
    studio: ServerProcess, page: Any
) -> None:
    errors = console_errors(page)
    started = time.monotonic()
    page.goto(studio.url + "/" + task_hash("etl#seeded#never-made"))
    expect(page.locator("#task-waiting")).to_be_visible()
    expect(page.get_by_role("heading", name="Task not found")).to_be_visible(timeout=20_000)
    waited = time.monotonic() - started
    assert 5 < waited < 15, waited
    expect(page.locator("#task-waiting")).to_have_count(0)
    # a malformed id is not waited for: it can never appear
    page.goto(studio.url + "/#/tasks/bad%20id")
    expect(page.get_by_role("heading", name="Task not found")).to_be_visible(timeout=3_000)
    assert errors == []
