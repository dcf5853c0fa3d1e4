"""Pipeline runs in the Studio: the list, and one run's steps drawn as a graph that follows
their states live (a waiting step turns succeeded without a reload); cancel from the page."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect
from studio_support import screenshot

from serverproc import ServerProcess

pytestmark = pytest.mark.browser

RUNS = "/api/v1/pipelines/runs"
GATE = "while [ ! -e go ]; do sleep 0.05; done"


def start(studio: ServerProcess, name: str, gate: str) -> dict[str, Any]:
    body = {
        "pipeline": name,
        "params": {},
        "steps": [
            {"key": "gate", "task": "command", "inputs": {"command": gate, "shell": True}},
            {"key": "left", "task": "demo", "inputs": {"x": 1, "y": 2}, "depends_on": ["gate"]},
            {"key": "right", "task": "demo", "inputs": {"x": 3, "y": 4}, "depends_on": ["gate"]},
            {"key": "join", "task": "demo", "inputs": {"x": 5, "y": 6},
             "depends_on": ["left", "right"]},
        ],
    }  # fmt: skip
    reply = httpx.post(studio.url + RUNS, json=body, headers=studio.headers, timeout=30)
    assert reply.status_code == 200, reply.text
    run: dict[str, Any] = reply.json()
    return run


def node(page: Any, task_id: str) -> Any:
    return page.locator(f"#pipeline-graph g.dag-node[data-task-id='{task_id}']")


def test_a_run_page_draws_its_steps_and_follows_them_live(studio: ServerProcess, page: Any) -> None:
    run = start(studio, "studio-live", GATE)
    ids = {step["key"]: step["task_id"] for step in run["steps"]}
    page.goto(studio.url + "/#/pipelines")
    row = page.locator(f"#pipelines-table tr[data-run-id='{run['id']}']")
    expect(row).to_contain_text("studio-live")
    row.click()
    expect(page).to_have_url(re.compile(f"#/pipelines/{run['id']}$"))
    expect(page.locator("#pipeline-graph g.dag-node")).to_have_count(4)
    expect(page.locator("#pipeline-graph path.dag-edge")).to_have_count(4)
    expect(node(page, ids["gate"])).to_have_class(re.compile("state-running"))
    expect(node(page, ids["join"])).to_have_class(re.compile("state-queued"))
    expect(page.locator("#pipeline-state")).to_contain_text("running")
    expect(page.locator("#pipeline-graph figcaption")).to_contain_text("4 tasks, 4 links")
    expect(page.locator("#pipeline-graph .legend-selected")).to_have_count(0)  # no such node
    screenshot(page, "pipeline-running")

    gate_dir = studio.workspace / "base" / ids["gate"]
    (gate_dir / "go").touch()
    for task_id in ids.values():  # no reload: the page follows the run
        expect(node(page, task_id)).to_have_class(re.compile("state-succeeded"), timeout=30_000)
    expect(page.locator("#pipeline-state")).to_contain_text("succeeded")
    expect(page.locator("#pipeline-cancel")).to_be_hidden()
    screenshot(page, "pipeline-succeeded")
    node(page, ids["join"]).click()
    expect(page).to_have_url(re.compile(re.escape(ids["join"].replace("#", "%23")) + "$"))


def test_cancel_from_the_page_ends_every_unfinished_step(studio: ServerProcess, page: Any) -> None:
    run = start(studio, "studio-cancel", GATE)
    page.goto(f"{studio.url}/#/pipelines/{run['id']}")
    expect(page.locator("#pipeline-state")).to_contain_text("running")
    page.locator("#pipeline-cancel").click()
    page.locator("#confirm-ok").click()
    expect(page.locator("#pipeline-state")).to_contain_text("cancelled", timeout=30_000)
    expect(page.locator("#pipeline-steps td >> text=cancelled")).to_have_count(4)
    expect(page.locator("#pipeline-steps")).not_to_contain_text("failed")


def test_an_unknown_run_says_so(studio: ServerProcess, page: Any) -> None:
    page.goto(f"{studio.url}/#/pipelines/none-20260101-000000-abcdef")
    expect(page.locator("#pipeline-graph")).to_contain_text("No pipeline run")
