"""The Studio and cached results: a submit the cache answers says so and opens the task
that served it, which is marked "cached result"; Rerun on it runs the task again."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from playwright.sync_api import expect
from studio_support import finish, sign_in_by_link, submit, task_hash

from serverproc import start_server, until

sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))

from cache_plugin import install, runs_counted  # noqa: E402

pytestmark = pytest.mark.browser


def test_a_cached_submit_opens_the_task_that_served_it(studio, page):
    first = submit(studio, "demo", x=4041, y=1, cache=True)
    assert finish(studio, first)["state"] == "succeeded"

    page.goto(studio.url + "/#/submit?task=demo")
    page.fill("#in-x", "4041")
    page.fill("#in-y", "1")
    page.select_option("#submit-cache", "true")
    page.click("#submit-task")
    expect(page).to_have_url(re.compile(re.escape(task_hash(first["task_id"])) + "$"))
    expect(page.locator(".toast").last).to_contain_text(f"Cached: {first['task_id']}")
    expect(page.locator("#task-cache")).to_contain_text("cached result")

    # a rerun runs (a new run of the task), though a cached result of these inputs exists
    page.click("#task-rerun")
    page.locator("#confirm-ok").click()
    until(lambda: studio.call("status", task_id=first["task_id"])["answer"]["run_id"]
          != first["run_id"])  # fmt: skip
    expect(page.locator("#task-state")).to_contain_text("succeeded", timeout=15_000)
    again = studio.call("status", task_id=first["task_id"])["answer"]
    assert again["run_id"] != first["run_id"] and again["result"]["result"] == 4042


def test_rerun_of_a_cacheable_task_runs_it_again(page, tmp_path):
    """A task class with cache = True: Rerun makes a new run, not an answer from the cache
    (which would be the very task shown)."""
    site, counter = tmp_path / "site", tmp_path / "runs"
    install(site, "1.0")
    server = start_server(tmp_path / "srv", env={"PYTHONPATH": str(site)})
    try:
        first = submit(server, "counted", value=5, counter=str(counter))
        assert finish(server, first)["state"] == "succeeded"
        sign_in_by_link(page, server)
        page.goto(server.url + "/" + task_hash(first["task_id"]))
        expect(page.locator("#task-cache")).to_contain_text("cached result")
        page.click("#task-rerun")
        page.locator("#confirm-ok").click()
        until(lambda: len(runs_counted(counter)) == 2)
        assert runs_counted(counter) == [first["task_id"]] * 2
    finally:
        server.stop()
