"""Lineage: a left-to-right DAG with a missing node; nodes open with click or Enter."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect
from studio_support import finish, screenshot, submit, task_hash

pytestmark = pytest.mark.browser

UP = "base#demo#lin-up"
SIDE = "base#demo#lin-side"
GHOST = "base#demo#lin-ghost"
DOWN = "base#demo#lin-down"


def node_x(page, task_id: str) -> float:
    transform = page.locator(f"g.dag-node[data-task-id='{task_id}']").get_attribute("transform")
    return float(re.match(r"translate\(([-\d.]+)", transform).group(1))


def test_lineage_graph_marks_missing_and_opens_nodes(studio, page):
    finish(studio, submit(studio, "demo", x=1, y=1, task_name="lin-up"))
    finish(studio, submit(studio, "demo", x=1, y=1, task_name="lin-side", source_tasks=UP))
    down = submit(studio, "demo", x=2, y=2, task_name="lin-down", source_tasks=f"{SIDE},{GHOST}")
    finish(studio, down)

    page.goto(studio.url + "/#/lineage/" + DOWN.replace("#", "%23"))
    nodes = page.locator("svg.dag g.dag-node")
    expect(nodes).to_have_count(4)
    missing = page.locator(f"g.dag-node[data-task-id='{GHOST}']")
    expect(missing).to_have_class(re.compile("is-missing"))
    expect(missing).to_have_attribute("aria-label", re.compile("missing"))
    expect(page.locator(f"g.dag-node[data-task-id='{DOWN}']")).to_have_class(
        re.compile("is-selected")
    )
    expect(page.locator("svg.dag path.dag-edge")).to_have_count(3)
    # the ghost -> down edge spans two layers: it is routed through a slot, not under lin-side
    routed = page.locator("svg.dag path.dag-edge-missing").get_attribute("d")
    assert " L " in routed
    assert node_x(page, UP) < node_x(page, SIDE) < node_x(page, DOWN)
    assert node_x(page, GHOST) < node_x(page, DOWN)
    screenshot(page, "lineage")

    missing.focus()
    page.keyboard.press("Enter")
    assert "/lineage/" in page.url

    page.locator(f"g.dag-node[data-task-id='{UP}']").focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(re.escape(task_hash(UP)) + "$"))
    expect(page.locator("#task-state")).to_contain_text("succeeded")

    # the task page draws the same graph; a click opens a node too
    page.locator(f"#task-lineage g.dag-node[data-task-id='{DOWN}']").click()
    expect(page).to_have_url(re.compile(re.escape(task_hash(DOWN)) + "$"))
    expect(page.locator("#task-lineage g.dag-node.is-missing")).to_have_count(1)


def test_arrow_keys_move_between_nodes(studio, page):
    finish(studio, submit(studio, "demo", x=1, y=1, task_name="arrow-a"))
    b = submit(studio, "demo", x=1, y=1, task_name="arrow-b", source_tasks="base#demo#arrow-a")
    finish(studio, b)
    page.goto(studio.url + "/#/lineage/" + b["task_id"].replace("#", "%23"))
    first = page.locator("g.dag-node[data-task-id='base#demo#arrow-a']")
    first.focus()
    page.keyboard.press("ArrowRight")
    expect(page.locator("g.dag-node[data-task-id='base#demo#arrow-b']")).to_be_focused()
    page.keyboard.press("ArrowLeft")
    expect(first).to_be_focused()


def test_running_task_is_marked_provisional(studio, page):
    finish(studio, submit(studio, "demo", x=1, y=1, task_name="prov-up"))
    running = submit(
        studio,
        "command",
        command="sleep 30",
        task_name="prov-run",
        source_tasks="base#demo#prov-up",
    )
    try:
        page.goto(studio.url + "/#/lineage/" + running["task_id"].replace("#", "%23"))
        node = page.locator(f"g.dag-node[data-task-id='{running['task_id']}']")
        expect(node).to_have_class(re.compile("is-provisional"))
        expect(node).to_have_attribute("aria-label", re.compile("links planned"))
        # the whole label shows, not cut short: it fits in its box
        status = node.locator("text.dag-status")
        expect(status).to_have_text("running · links planned")
        assert status.evaluate("t => t.getComputedTextLength()") < 210 - 16 - 4
        expect(page.locator("g.dag-node[data-task-id='base#demo#prov-up']")).not_to_have_class(
            re.compile("is-provisional")
        )
    finally:
        studio.call("cancel", task_id=running["task_id"])
