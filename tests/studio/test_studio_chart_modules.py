"""The Studio's chart and compare modules, run in Chromium under the Studio's own policy:
uPlot draws on its canvas with no policy report, non-finite values are gaps, the params
that differ come first, compare addresses and list sorts read back as written."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser


@pytest.fixture
def modules(static_studio, page):
    page.goto(static_studio + "/#/nowhere")
    page.wait_for_selector("h1")
    return page


def run(page, body: str):
    return page.evaluate(f"async () => {{ {body} }}")


def test_a_chart_draws_its_lines_on_a_canvas_under_the_studio_policy(modules):
    drawn = run(
        modules,
        """
        const { metricChart } = await import('/js/charts.js');
        const steps = Array.from({length: 200}, (_, i) => i);
        const chart = metricChart('loss', [
          {label: 'run a', steps, values: steps.map((i) => 1 / (i + 1)), colour: 0},
          {label: 'run b', steps: steps.slice(0, 50), values: steps.slice(0, 50).map((i) => 2 - i / 50), colour: 1},
        ]);
        document.getElementById('main').append(chart.el);
        await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
        const canvas = chart.el.querySelector('canvas');
        const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
        let inked = 0;
        for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) inked += 1;
        const legend = [...chart.el.querySelectorAll('.u-legend .u-series .u-label')].map((e) => e.textContent);
        return {series: chart.el.dataset.series, points: chart.el.dataset.points, inked, legend};
        """,
    )
    assert drawn["series"] == "2" and drawn["points"] == "250"
    assert drawn["inked"] > 500, drawn  # lines and grid, not a blank canvas
    assert drawn["legend"][1:] == ["run a", "run b"]


def test_non_finite_values_are_gaps_and_missing_steps_are_joined_over(modules):
    data = run(
        modules,
        """
        const { alignLines } = await import('/js/charts.js');
        const data = alignLines([
          {steps: [0, 1, 2, 3], values: [1, 'NaN', 'Infinity', 4]},
          {steps: [3, 1, 5], values: ['-Infinity', 2, 6]},
          {steps: [0, 1, 2], values: [NaN, -Infinity, Number('7')]},
        ]);
        // JSON has no undefined: mark it so the test can tell a gap (null) from a join
        return data.map((column) => column.map((v) => v === undefined ? 'joined' : v));
        """,
    )
    assert data == [
        [0, 1, 2, 3, 5],
        [1, None, None, 4, "joined"],
        ["joined", 2, "joined", None, 6],
        [None, None, 7, "joined", "joined"],
    ]


def test_params_that_differ_are_shown_first_whatever_order_they_come_in(modules):
    names = run(
        modules,
        """
        const { groupParams } = await import('/js/views/compare.js');
        const rows = [
          {name: 'alpha', values: [1, 1], differs: false},
          {name: 'beta', values: [1, 2], differs: true},
          {name: 'gamma', values: ['a', 'a'], differs: false},
          {name: 'zeta', values: [null, 3], differs: true},
        ];
        return groupParams(rows).map((row) => row.name);
        """,
    )
    assert names == ["beta", "zeta", "alpha", "gamma"]


def test_compare_addresses_and_tracked_sorts_read_back(modules):
    got = run(
        modules,
        """
        const { compareHref, parseRefs } = await import('/js/views/compare.js');
        const { isTrackedSort, cellText, runParams } = await import('/js/views/taskcolumns.js');
        const href = compareHref(['train#sweep#c=0.1', 'train#sweep#c=1@' + 'a'.repeat(32)]);
        const refs = parseRefs(new URLSearchParams(href.split('?')[1]));
        const status = {config: {task_name: 'x', source_tasks: '', C: 0.1, model: 'ridge'},
                        params: {C: 5, seed: 7}, metrics: {'cv/r2': {last: 'NaN'}, acc: {last: 0.123456789}}};
        return {
          href, refs,
          sorts: ['metrics.cv/r2', 'params.C', 'metrics.', 'state', 'params.a\\u0007b', 'other.x'].map(isTrackedSort),
          params: runParams(status),
          cells: [cellText(status, {kind: 'params', name: 'C'}), cellText(status, {kind: 'metrics', name: 'cv/r2'}),
                  cellText(status, {kind: 'metrics', name: 'acc'}), cellText(status, {kind: 'params', name: 'absent'})],
        };
        """,
    )
    assert "#" not in got["href"][1:]  # a task id's '#' is encoded in the route
    assert got["refs"] == ["train#sweep#c=0.1", "train#sweep#c=1@" + "a" * 32]
    assert got["sorts"] == [True, True, False, False, False, False]
    assert got["params"] == {"C": 5, "model": "ridge", "seed": 7}
    assert got["cells"] == ["5", "NaN", "0.123457", ""]


def test_chosen_columns_survive_a_reload_and_junk_in_storage_is_ignored(modules):
    got = run(
        modules,
        """
        const { loadColumns } = await import('/js/views/taskcolumns.js');
        const key = 'runyard.studio.taskColumns';
        localStorage.setItem(key, JSON.stringify([
          {kind: 'metrics', name: 'loss'}, {kind: 'params', name: 'C'},
          {kind: 'status', name: 'x'}, {kind: 'params', name: ''}, {kind: 'params'}, 'junk',
        ]));
        const kept = loadColumns();
        localStorage.setItem(key, '{not json');
        const broken = loadColumns();
        localStorage.removeItem(key);
        return {kept, broken};
        """,
    )
    assert got["kept"] == [{"kind": "metrics", "name": "loss"}, {"kind": "params", "name": "C"}]
    assert got["broken"] == []
