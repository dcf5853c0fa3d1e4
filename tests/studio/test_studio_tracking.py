"""Experiment tracking in the Studio, on a server of its own: param and metric columns in
the task list (picked, remembered, sorted by the server), a chart per metric on the task
page with a line per run (a rerun adds one; live while the task runs), and the compare
view (params that differ first, overlaid charts), all in Chromium with no console error."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect
from studio_support import console_errors, finish, screenshot, sign_in_by_link, submit

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


EVIL_ID = "train#evil#forged"
EVIL_NAME = "<img src=x onerror=window.__pwned=1>"
EVIL_VALUE = "<b onmouseover=window.__pwned=2>bold</b>"


def seed_forged(workspace: Path) -> None:
    """A record whose params and metric names are markup, as a forged or synced status
    could hold them (the server reads records as untrusted; the Studio shows them as text)."""
    ws = Workspace.open(workspace, workspace.parent / "logs")
    folder = ws.task_dir(EVIL_ID)
    folder.mkdir(parents=True)
    stamp = "2026-04-01T10:00:00.000000Z"
    record = {
        "task_id": EVIL_ID, "run_id": "e" * 32, "task_type": "train", "task_name": "evil",
        "state": "succeeded", "config": {"task_name": "forged", "source_tasks": "", "C": 0.1},
        "created_at": stamp, "started_at": stamp, "finished_at": stamp, "pid": None,
        "exit_code": 0, "error": "", "result": {}, "steps": [], "log_path": "",
        "params": {EVIL_NAME: EVIL_VALUE},
        "metrics": {EVIL_NAME: {"last": 1.0, "min": 1.0, "max": 1.0, "step": 0, "count": 1}},
    }  # fmt: skip
    write_json_atomic(folder / "status.json", record, fsync=False)


BIG_ID = "train#steps#three-metrics"
BIG_STEPS = 1000


def seed_big(workspace: Path) -> None:
    """A run that logged 3 metrics over 1,000 steps (its summary as the worker writes it)."""
    ws = Workspace.open(workspace, workspace.parent / "logs")
    folder = ws.task_dir(BIG_ID)
    folder.mkdir(parents=True)
    values = {
        "loss": [1 / (s + 1) for s in range(BIG_STEPS)],
        "acc": [s / BIG_STEPS for s in range(BIG_STEPS)],
        "lr": [0.1 * 0.999**s for s in range(BIG_STEPS)],
    }
    with (folder / "metrics.jsonl").open("w") as out:
        for step in range(BIG_STEPS):
            for name, series in values.items():
                point = {"name": name, "step": step, "value": series[step], "time": 1.0 + step}
                out.write(json.dumps(point) + "\n")
    stamp = "2026-04-01T11:00:00.000000Z"
    record = {
        "task_id": BIG_ID, "run_id": "b" * 32, "task_type": "train", "task_name": "steps",
        "state": "succeeded", "config": {"task_name": "three-metrics", "source_tasks": ""},
        "created_at": stamp, "started_at": stamp, "finished_at": stamp, "pid": None,
        "exit_code": 0, "error": "", "result": {}, "steps": [], "log_path": "",
        "metrics": {name: summary(series) for name, series in values.items()},
    }  # fmt: skip
    write_json_atomic(folder / "status.json", record, fsync=False)


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server of this module's own, its workspace holding a finished sweep."""
    root = tmp_path_factory.mktemp("studio-tracking")
    seed(root / "ws")
    seed_forged(root / "ws")
    seed_big(root / "ws")
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
    expect(page).to_have_url(re.compile(r"sort=params\.C&order=asc"))
    expect(page.locator(ROWS).nth(1)).to_have_attribute("data-task-id", sweep_id("0.1"))
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


def canvas_ink(page: Any, metric: str) -> int:
    """How many pixels of a metric chart's canvas are drawn on (0 for a blank canvas)."""
    ink: int = page.locator(f".metric-chart[data-metric='{metric}'] canvas").evaluate(
        """canvas => {
            const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
            let n = 0;
            for (let i = 3; i < data.length; i += 4) if (data[i] > 0) n += 1;
            return n;
        }"""
    )
    return ink


def test_compare_view_lists_the_differing_param_first_and_overlays_the_charts(
    tracked: ServerProcess, page: Any
) -> None:
    errors = console_errors(page)
    sign_in_by_link(page, tracked)
    page.goto(tracked.url + "/#/tasks?task=sweep&sort=task_id&order=asc")
    expect(page.locator(ROWS)).to_have_count(len(SWEEP))
    compare = page.locator("#bulk-compare")
    page.locator(f"{ROWS}[data-task-id='{sweep_id('0.1')}'] input.row-check").check()
    expect(compare).to_have_attribute("aria-disabled", "")  # one task is no comparison
    page.locator(f"{ROWS}[data-task-id='{sweep_id('1')}'] input.row-check").check()
    expect(compare).not_to_have_attribute("aria-disabled", "")
    compare.click()

    expect(page).to_have_url(re.compile(r"#/compare\?ids="))
    rows = page.locator("#compare-params tbody tr")
    expect(rows).to_have_count(3)  # C, model, seed
    expect(rows.first).to_have_attribute("data-param", "C")
    expect(rows.first).to_have_attribute("data-differs", "true")
    expect(rows.first.locator(".differs-mark")).to_have_text("differs")
    expect(rows.first.locator("td")).to_have_text(["0.1", "1"])
    assert rows.evaluate_all("rs => rs.slice(1).map(r => r.dataset.differs)") == ["false"] * 2
    expect(page.locator("#params-summary")).to_contain_text("1 of 3 params differ")
    last = page.locator("#compare-metrics tr[data-metric='cv_r2'] .metric-last")
    expect(last).to_have_text(["0.83", "0.77"])

    for metric in ("cv_r2", "loss"):
        chart = page.locator(f"#compare-charts .metric-chart[data-metric='{metric}']")
        expect(chart).to_have_attribute("data-series", "2")
        expect(chart).to_have_attribute("data-points", "10")
        assert canvas_ink(page, metric) > 300
    screenshot(page, "tracking-compare")

    # an address of one ref, or a ref that names no task, says so instead of failing
    page.goto(tracked.url + "/#/compare?ids=" + sweep_id("0.1").replace("#", "%23"))
    expect(page.locator("#compare-count")).to_contain_text("Pick from 2 to 20")
    page.goto(tracked.url + "/#/compare?ids=train%23sweep%23c-0p1,train%23sweep%23nope")
    expect(page.locator(".alert-error")).to_contain_text("Could not compare")
    assert [e for e in errors if "404" not in e] == []


def test_a_task_page_draws_a_chart_per_metric_with_non_finite_values_as_gaps(
    tracked: ServerProcess, page: Any
) -> None:
    errors = console_errors(page)
    sign_in_by_link(page, tracked)
    page.goto(tracked.url + "/#/tasks/" + sweep_id("5").replace("#", "%23"))
    charts = page.locator("#task-metrics .metric-chart")
    expect(charts).to_have_count(2)
    assert charts.evaluate_all("cs => cs.map(c => c.dataset.metric)") == ["cv_r2", "loss"]
    score = page.locator("#task-metrics .metric-chart[data-metric='cv_r2']")
    expect(score).to_have_attribute("data-series", "1")
    expect(score).to_have_attribute("data-points", "5")
    assert canvas_ink(page, "cv_r2") > 300
    runs = page.locator("#task-metrics .metric-run-list li")
    expect(runs).to_have_count(1)
    expect(runs.first).to_contain_text("succeeded (current)")
    # the last point is NaN: hovering it reads "—" in the legend, not a number
    box = score.locator(".u-over").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] - 1, box["y"] + box["height"] / 2)
    expect(score.locator(".u-legend .u-series").nth(1).locator(".u-value")).to_have_text("—")
    page.mouse.move(box["x"] + 2, box["y"] + box["height"] / 2)
    expect(score.locator(".u-legend .u-series").nth(1).locator(".u-value")).to_have_text("0.16")

    page.goto(tracked.url + "/#/tasks/" + sweep_id("50").replace("#", "%23"))
    expect(page.locator("#metrics-empty")).to_contain_text("No metrics logged")
    assert errors == []


LIVE_STEPS = 24
LIVE_SCRIPT = (
    f"for i in $(seq 0 {LIVE_STEPS - 1}); do "
    'echo "{\\"name\\": \\"loss\\", \\"step\\": $i, \\"value\\": $((100 - i))}" >> "$RUNYARD_METRICS_FILE"; '
    'echo "{\\"name\\": \\"acc\\", \\"step\\": $i, \\"value\\": $i}" >> "$RUNYARD_METRICS_FILE"; '
    "sleep 0.15; done"
)


def points_drawn(page: Any, metric: str) -> int:
    chart = page.locator(f"#task-metrics .metric-chart[data-metric='{metric}']")
    if not chart.count():
        return 0
    return int(chart.get_attribute("data-points") or 0)


def test_a_running_task_is_charted_live_and_a_rerun_adds_a_second_line(
    tracked: ServerProcess, page: Any
) -> None:
    errors = console_errors(page)
    handle = submit(tracked, "command", command=LIVE_SCRIPT, shell=True, task_name="live-fit")
    sign_in_by_link(page, tracked)
    streams: list[str] = []
    series: list[str] = []
    page.on("request", lambda r: "/stream_task/events" in r.url and streams.append(r.url))
    page.on("request", lambda r: "/metrics?" in r.url and series.append(r.url))
    page.goto(tracked.url + "/#/tasks/" + handle["task_id"].replace("#", "%23"))
    loss = page.locator("#task-metrics .metric-chart[data-metric='loss']")
    expect(loss).to_have_attribute("data-series", "1", timeout=10_000)
    # drawn while it runs: some points, then more, before the run ends
    page.wait_for_function(
        "() => Number(document.querySelector(\"#task-metrics .metric-chart[data-metric='loss']\")"
        "?.dataset.points || 0) > 0"
    )
    seen_running = points_drawn(page, "loss")
    assert page.locator("#task-state").inner_text().strip() == "running"
    assert seen_running < LIVE_STEPS
    assert streams and all(url.endswith("?metrics=true") for url in streams), streams
    expect(loss).to_have_attribute("data-points", str(LIVE_STEPS), timeout=15_000)
    expect(page.locator("#task-state")).to_contain_text("succeeded", timeout=10_000)
    assert canvas_ink(page, "loss") > 300
    # every run's series are read once; while it runs, only the current run's again
    assert "run_id=" not in series[0]
    assert len(series) >= 2 and all(f"run_id={handle['run_id']}" in url for url in series[1:])

    page.click("#task-rerun")
    page.click("#confirm-ok")
    runs = page.locator("#task-metrics .metric-run-list li")
    expect(runs).to_have_count(2, timeout=15_000)
    expect(loss).to_have_attribute("data-series", "2", timeout=15_000)
    expect(page.locator("#task-state")).to_contain_text("succeeded", timeout=15_000)
    expect(loss).to_have_attribute("data-points", str(2 * LIVE_STEPS), timeout=10_000)
    expect(runs.first).to_contain_text("(current)")
    legend = loss.locator(".u-legend .u-series .u-label")
    expect(legend).to_have_count(3)  # the step, then one line per run
    screenshot(page, "tracking-task-metrics")

    # the two runs, ticked on the task page, open the compare view of that task's runs
    first_run = handle["run_id"]
    page.locator(f"#task-metrics li[data-run-id='{first_run}'] input").check()
    runs.first.locator("input").check()
    page.click("#compare-runs")
    expect(page).to_have_url(re.compile(r"#/compare\?ids=.*%40" + first_run))
    chart = page.locator("#compare-charts .metric-chart[data-metric='acc']")
    expect(chart).to_have_attribute("data-series", "2")
    expect(page.locator("#compare-params")).to_be_visible()
    assert errors == []


def test_markup_in_param_and_metric_names_is_shown_as_text(
    tracked: ServerProcess, page: Any
) -> None:
    sign_in_by_link(page, tracked)
    refs = ",".join(ref.replace("#", "%23") for ref in (EVIL_ID, sweep_id("0.1")))
    page.goto(tracked.url + "/#/compare?ids=" + refs)
    evil_row = page.locator("#compare-params tbody tr").filter(has_text=EVIL_NAME)
    expect(evil_row).to_have_count(1)
    expect(evil_row.locator("th")).to_contain_text(EVIL_NAME)
    expect(evil_row.locator("td").first).to_have_text(EVIL_VALUE)
    evil_row.locator("td").first.hover()
    expect(page.locator("#compare-metrics tbody th").filter(has_text=EVIL_NAME)).to_have_count(1)

    page.goto(tracked.url + "/#/tasks?task=evil")
    expect(page.locator(ROWS)).to_have_count(1)
    page.click("#column-picker-toggle")
    for kind in ("params", "metrics"):
        label = page.locator(f"#column-picker-body fieldset[data-kind='{kind}'] label")
        expect(label.filter(has_text=EVIL_NAME)).to_have_count(1)
        label.filter(has_text=EVIL_NAME).locator("input").check()
    header = page.locator("#tasks-table thead th.col-tracked")
    expect(header).to_have_count(2)
    expect(header.first).to_contain_text(EVIL_NAME)
    expect(page.locator(f"{ROWS} td.col-tracked").first).to_have_text(EVIL_VALUE)
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#main img, #main b").count() == 0
    # the column's sort is asked of the server as it is, and answered without a failure
    header.first.locator("button").click()
    expect(page.locator(ROWS)).to_have_count(1)
    expect(page.locator("#tasks-summary")).to_contain_text("1 task matching")


def test_runs_without_metrics_can_still_be_ticked_and_compared(
    tracked: ServerProcess, page: Any
) -> None:
    first = finish(tracked, submit(tracked, "demo", x=1, y=2, task_name="plain-fit"))
    second = finish(tracked, submit(tracked, "demo", x=1, y=2, task_name="plain-fit"))
    assert first["task_id"] == second["task_id"] and first["run_id"] != second["run_id"]
    sign_in_by_link(page, tracked)
    page.goto(tracked.url + "/#/tasks/" + first["task_id"].replace("#", "%23"))
    expect(page.locator("#metrics-empty")).to_contain_text("No metrics logged")
    boxes = page.locator("#task-metrics .metric-run-list input.compare-run")
    expect(boxes).to_have_count(2)
    link = page.locator("#compare-runs")
    boxes.first.check()
    link.click()  # one run is no comparison: the link stays put
    expect(page).to_have_url(re.compile(r"#/tasks/"))
    boxes.nth(1).check()
    link.click()
    expect(page.locator("#params-summary")).to_have_text("Every param is the same.")
    heads = page.locator("#compare-params thead th[data-run-id]")
    assert sorted(heads.evaluate_all("hs => hs.map(h => h.dataset.runId)")) == sorted(
        [first["run_id"], second["run_id"]]
    )
    expect(page.locator("#compare-charts")).to_contain_text("None of these runs logged a metric")


def test_three_metrics_over_a_thousand_steps_are_drawn_whole(
    tracked: ServerProcess, page: Any
) -> None:
    errors = console_errors(page)
    sign_in_by_link(page, tracked)
    started = time.perf_counter()
    page.goto(tracked.url + "/#/tasks/" + BIG_ID.replace("#", "%23"))
    charts = page.locator("#task-metrics .metric-chart")
    for metric in ("acc", "loss", "lr"):
        chart = page.locator(f"#task-metrics .metric-chart[data-metric='{metric}']")
        expect(chart).to_have_attribute("data-points", str(BIG_STEPS))
    print(f"3 charts of {BIG_STEPS} steps drawn {time.perf_counter() - started:.2f} s after goto")
    assert charts.evaluate_all("cs => cs.map(c => c.dataset.metric)") == ["acc", "loss", "lr"]
    for metric in ("acc", "loss", "lr"):
        assert canvas_ink(page, metric) > 300
    # the cursor on the last step reads the last point of the file
    acc = page.locator("#task-metrics .metric-chart[data-metric='acc']")
    box = acc.locator(".u-over").bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] - 1, box["y"] + box["height"] / 2)
    expect(acc.locator(".u-legend .u-series").first.locator(".u-value")).to_have_text("999")
    expect(acc.locator(".u-legend .u-series").nth(1).locator(".u-value")).to_have_text("0.999")
    assert errors == []


def test_a_link_sorted_by_a_metric_shows_that_column(tracked: ServerProcess, page: Any) -> None:
    sign_in_by_link(page, tracked)
    page.goto(tracked.url + "/#/tasks?task=sweep&sort=metrics.loss&order=asc")
    header = page.locator("th[data-column='metrics.loss']")
    expect(header).to_have_attribute("aria-sort", "ascending")
    expect(page.locator(ROWS).first).to_have_attribute("data-task-id", sweep_id("5"))
    assert ids(page) == [sweep_id(c) for c in ("5", "1", "0.1", "0.01", "50")]
    expect(page.locator(f"{ROWS} td[data-column='metrics.loss']").first).to_have_text("0.1")
