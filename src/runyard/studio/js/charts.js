// Metric charts: one uPlot line chart per metric over steps, one line per run. The only
// module that reaches the vendored uPlot; it styles through element.style (CSSOM), which
// the Studio's style-src 'self' allows.

import uPlot from "./vendor/uPlot.esm.js";
import { h } from "./dom.js";

const HEIGHT = 220;
const MIN_WIDTH = 260;
// Tableau 10: told apart by most colour-blind readers, readable on light and dark surfaces
const COLOURS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

/** The colour of the n-th run (the same run keeps its colour in every chart of a page). */
export function lineColour(n) {
  return COLOURS[n % COLOURS.length];
}

/** A wire value (a number, or "NaN" / "Infinity" / "-Infinity") as a number to draw, or
 * null where it is not finite: uPlot draws null as a gap. */
export function drawable(value) {
  return typeof value === "number" && Number.isFinite(value) ? value : null;
}

/**
 * uPlot's aligned data for ``lines`` ([{steps, values}]): the sorted union of every step,
 * then one array per line. A step a line has no point at is ``undefined`` (uPlot joins over
 * it); a non-finite value is ``null`` (a gap). A step logged twice keeps its last value.
 */
export function alignLines(lines) {
  const steps = [...new Set(lines.flatMap((line) => line.steps))].sort((a, b) => a - b);
  const index = new Map(steps.map((step, i) => [step, i]));
  const columns = lines.map((line) => {
    const column = new Array(steps.length).fill(undefined);
    line.steps.forEach((step, i) => {
      column[index.get(step)] = drawable(line.values[i]);
    });
    return column;
  });
  return [steps, ...columns];
}

/** A value as the Studio shows it: numbers to 6 significant digits, "NaN"/"Infinity" kept. */
export function formatValue(value) {
  if (value === null || value === undefined) return "—";
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value) && Math.abs(value) < 1e15) return String(value);
  const text = Math.abs(value) >= 1e-4 && Math.abs(value) < 1e9 ? String(Number(value.toPrecision(6))) : value.toExponential(4);
  return text;
}

function cssVar(name, fallback) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
}

function axis(label) {
  const text = cssVar("--muted", "#545b66");
  const grid = cssVar("--border", "#d5d9e0");
  return {
    label, stroke: text, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 },
    values: (_u, splits) => splits.map((v) => (v === null ? "" : formatValue(v))),
  };
}

function options(name, lines, width) {
  return {
    width,
    height: HEIGHT,
    title: name,
    scales: { x: { time: false } },
    axes: [axis("step"), { ...axis(""), size: 64 }],
    cursor: { drag: { x: true, y: false } },
    legend: { live: true },
    series: [
      { label: "step", value: (_u, v) => (v === null || v === undefined ? "—" : String(v)) },
      ...lines.map((line, i) => ({
        label: line.label,
        stroke: lineColour(line.colour ?? i),
        width: 1.5,
        spanGaps: false,
        value: (_u, v) => (v === null || v === undefined ? "—" : formatValue(v)),
      })),
    ],
  };
}

/**
 * A chart of one metric. ``lines``: [{label, steps, values, colour}] (values in wire form,
 * colour the index given to lineColour).
 * Answers {el, update(lines), destroy()}; ``el`` carries data-metric and data-series (the
 * number of lines drawn) for whoever reads it. update() redraws in place when the lines
 * are the same runs, and rebuilds the chart when a run was added.
 */
export function metricChart(name, lines) {
  const el = h("figure", { class: "metric-chart", "data-metric": name });
  let plot = null;
  let labels = "";
  let destroyed = false;
  const width = () => Math.max(MIN_WIDTH, Math.floor(el.clientWidth || el.parentElement?.clientWidth || 600));
  const draw = (next) => {
    const key = JSON.stringify(next.map((line) => line.label));
    const data = alignLines(next);
    if (plot && key === labels) {
      plot.setData(data);
    } else {
      plot?.destroy();
      labels = key;
      plot = new uPlot(options(name, next, width()), data, el);
    }
    el.setAttribute("aria-label", `${name} over steps: ${next.map((line) => line.label).join("; ")}`);
    el.dataset.series = String(next.length);
    el.dataset.points = String(next.reduce((n, line) => n + line.steps.length, 0));
  };
  const resize = new ResizeObserver(() => {
    if (plot && el.clientWidth && Math.abs(plot.width - width()) > 2) plot.setSize({ width: width(), height: HEIGHT });
  });
  resize.observe(el);
  // uPlot measures its container: the first draw waits until the figure is in the page
  requestAnimationFrame(() => {
    if (!destroyed) draw(lines);
  });
  return {
    el,
    update(next) {
      lines = next;
      if (plot) draw(next);
    },
    destroy() {
      destroyed = true;
      resize.disconnect();
      plot?.destroy();
      plot = null;
    },
  };
}

/** The charts of ``byMetric`` ({name: lines}), sorted by name, kept in ``container``: an
 * existing chart is updated, a new metric gets a chart, one no longer there is removed. */
export class ChartGrid {
  constructor() {
    this.el = h("div", { class: "chart-grid" });
    this.charts = new Map();
  }

  show(byMetric) {
    const names = Object.keys(byMetric).sort();
    for (const [name, chart] of this.charts) {
      if (!(name in byMetric)) {
        chart.destroy();
        chart.el.remove();
        this.charts.delete(name);
      }
    }
    for (const name of names) {
      let chart = this.charts.get(name);
      if (chart) chart.update(byMetric[name]);
      else {
        chart = metricChart(name, byMetric[name]);
        this.charts.set(name, chart);
      }
    }
    const order = names.map((name) => this.charts.get(name).el);
    if ([...this.el.children].some((child, i) => child !== order[i]) || this.el.children.length !== order.length) {
      this.el.append(...order);
    }
  }

  destroy() {
    for (const chart of this.charts.values()) chart.destroy();
    this.charts.clear();
  }
}
