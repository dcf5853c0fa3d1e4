"""Experiment tracking in the Studio, on a server of its own: param and metric columns in
the task list (picked, remembered, sorted by the server), a chart per metric on the task
page with a line per run (a rerun adds one; live while the task runs), and the compare
view (params that differ first, overlaid charts), all in Chromium with no console error."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect
from studio_support import console_errors, screenshot, sign_in_by_link

from runyard.workspace.atomic import write_json_atomic
from runyard.workspace.layout import Workspace
from serverproc import ServerProcess, start_server

pytestmark = pytest.mark.browser

ROWS = "#tasks-table tbody tr.row-link"
# a sweep of C, recorded as a finished workspace holds it: C is an input, seed a logged
# param, cv_r2 a metric summary (NaN for the diverged run, none for the one that failed)
SWEEP = {"0.01": 0.61, "0.1": 0.83, "1": 0.77, "5": "NaN", "50": None}


def sweep_id(c: str) -> str:
    return f"train#sweep#c-{c.replace('.', 'p')}"


def metric_lines(c: str, score: float | str | None) -> list[dict[str, Any]]:
    if score is None:
        return []
    final = 0.8 if score == "NaN" else float(score)
    points = [
        {"name": "cv_r2", "step": step, "value": round(final * (step + 1) / 5, 4), "time": 1.0}
        for step in range(4)
    ]
    points.append({"name": "cv_r2", "step": 4, "value": score, "time": 1.0})
    points += [
        {"name": "loss", "step": step, "value": 1 / (step + 1 + float(c)), "time": 1.0}
        for step in range(5)
    ]
    return points


def summary(values: list[float | str]) -> dict[str, Any]:
    finite = [v for v in values if isinstance(v, float | int)]
    return {
        "last": values[-1], "min": min(finite) if finite else None,
        "max": max(finite) if finite else None, "step": len(values) - 1, "count": len(values),
    }  # fmt: skip


def seed(workspace: Path) -> None:
    ws = Workspace.open(workspace, workspace.parent / "logs")
    ws.ensure()
    for n, (c, score) in enumerate(SWEEP.items()):
        task_id = sweep_id(c)
        folder = ws.task_dir(task_id)
        folder.mkdir(parents=True)
        points = metric_lines(c, score)
        by_name: dict[str, list[float | str]] = {}
        for point in points:
            by_name.setdefault(point["name"], []).append(point["value"])
        (folder / "metrics.jsonl").write_text("".join(json.dumps(p) + "\n" for p in points))
        stamp = f"2026-04-01T09:{n:02d}:00.000000Z"
        record = {
            "task_id": task_id, "run_id": f"{n + 1:032x}", "task_type": "train",
            "task_name": "sweep", "state": "failed" if score is None else "succeeded",
            "config": {"task_name": task_id.split("#")[2], "source_tasks": "", "C": float(c), "model": "ridge"},
            "created_at": stamp, "started_at": stamp, "finished_at": stamp, "pid": None,
            "exit_code": 1 if score is None else 0, "error": "", "result": {}, "steps": [],
            "log_path": "", "params": {"seed": 7},
        }  # fmt: skip
        if by_name:
            record["metrics"] = {name: summary(values) for name, values in by_name.items()}
        write_json_atomic(folder / "status.json", record, fsync=False)


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server of this module's own, its workspace holding a finished sweep."""
    root = tmp_path_factory.mktemp("studio-tracking")
    seed(root / "ws")
    server = start_server(root, config={"max_concurrent_tasks": 4})
    try:
        yield server
    finally:
        server.stop()


def ids(page: Any) -> list[str]:
    found: list[str] = page.locator(ROWS).evaluate_all("rows => rows.map(r => r.dataset.taskId)")
    return found


def test_param_and_metric_columns_are_picked_remembered_and_sorted(
    tracked: ServerProcess, page: Any
) -> None:
    errors = console_errors(page)
    sign_in_by_link(page, tracked)
    page.goto(tracked.url + "/#/tasks?task=sweep")
    expect(page.locator(ROWS)).to_have_count(len(SWEEP))
    page.click("#column-picker-toggle")
    picker = page.locator("#column-picker-body")
    # the names on the page are offered: inputs and logged params, and the metrics
    for column in ("params.C", "params.model", "params.seed", "metrics.cv_r2", "metrics.loss"):
        expect(picker.locator(f"input[data-column='{column}']")).to_have_count(1)
    expect(picker.locator("input[data-column='params.task_name']")).to_have_count(0)
    picker.locator("input[data-column='metrics.cv_r2']").check()
    picker.locator("input[data-column='params.C']").check()
    page.click("#column-picker-toggle")  # close the menu

    score = page.locator("th[data-column='metrics.cv_r2'] button")
    expect(score).to_have_text("cv_r2")
    cell = f"{ROWS}[data-task-id='{sweep_id('0.1')}'] td[data-column='metrics.cv_r2']"
    expect(page.locator(cell)).to_have_text("0.83")
    nan_cell = f"{ROWS}[data-task-id='{sweep_id('5')}'] td[data-column='metrics.cv_r2']"
    expect(page.locator(nan_cell)).to_have_text("NaN")

    score.click()  # a metric's first click: best first; NaN and no value last
    expect(page).to_have_url(re.compile(r"sort=metrics\.cv_r2&order=desc"))
    expect(page.locator(ROWS).first).to_have_attribute("data-task-id", sweep_id("0.1"))
    assert ids(page)[:3] == [sweep_id("0.1"), sweep_id("1"), sweep_id("0.01")]
    assert set(ids(page)[3:]) == {sweep_id("5"), sweep_id("50")}
    score.click()
    expect(page.locator(ROWS).first).to_have_attribute("data-task-id", sweep_id("0.01"))
    assert ids(page)[:3] == [sweep_id("0.01"), sweep_id("1"), sweep_id("0.1")]

    page.locator("th[data-column='params.C'] button").click()  # a param: ascending first
    expect(page.locator(ROWS).first).to_have_attribute("data-task-id", sweep_id("0.01"))
    assert ids(page) == [sweep_id(c) for c in ("0.01", "0.1", "1", "5", "50")]
    screenshot(page, "tracking-task-list-columns")

    # the columns are this browser's choice: a fresh load keeps them, and the sort in the URL
    page.reload()
    expect(page.locator("th[data-column='metrics.cv_r2']")).to_be_visible()
    expect(page.locator("th[data-column='params.C'][aria-sort='ascending']")).to_be_visible()
    expect(page.locator(ROWS).first).to_have_attribute("data-task-id", sweep_id("0.01"))
    page.click("#column-picker-toggle")
    page.locator("#column-picker-body input[data-column='params.C']").uncheck()
    expect(page.locator("th[data-column='params.C']")).to_have_count(0)
    expect(page).not_to_have_url(re.compile(r"sort=params"))  # its sort went with it
    assert errors == []
