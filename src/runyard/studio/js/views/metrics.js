// The task page's metrics: a chart per metric over steps, one line per run (the current
// run and the earlier runs kept), from GET /api/v1/tasks/{id}/metrics. While the task runs
// the series are read again, at most once a second, whenever new points are announced
// (SSE `metric` events) or the status's summary moves. Runs can be ticked for the compare
// view.

import { agent } from "../api.js";
import { ChartGrid, lineColour } from "../charts.js";
import { errorBox, h, replace, spinner } from "../dom.js";
import { pluralise } from "../format.js";
import { compareHref } from "./compare.js";

const MAX_POINTS = 2000;
const REFRESH_MS = 1000;

export const shortRun = (runId) => String(runId || "").slice(0, 8);

/** {metric: [{label, steps, values, colour}]}: one line per run that logged the metric,
 * coloured by the run's place in ``runs`` so a run has one colour on every chart. */
export function linesByMetric(runs, labelOf) {
  const byMetric = {};
  runs.forEach((run, colour) => {
    for (const [name, series] of Object.entries(run.metrics || {})) {
      byMetric[name] ||= [];
      byMetric[name].push({ label: labelOf(run), steps: series.steps || [], values: series.values || [], colour });
    }
  });
  return byMetric;
}

const runLabel = (run) => `run ${shortRun(run.run_id)} · ${run.state}${run.current ? " · current" : ""}`;

export class MetricsPanel {
  constructor(taskId) {
    this.taskId = taskId;
    this.alive = true;
    this.last = 0;
    this.grid = new ChartGrid();
    this.picked = new Set();
    this.runsEl = h("div", { class: "metric-runs" });
    this.el = h("div", { id: "task-metrics" }, spinner("Loading metrics…"));
  }

  destroy() {
    this.alive = false;
    clearTimeout(this.timer);
    this.grid.destroy();
  }

  reset() {
    this.runs = null;
    this.mode = null;
    this.grid.destroy();
    this.grid = new ChartGrid();
    this.runsKey = null;
  }

  /** New points were announced: read again, no sooner than a second after the last read. */
  poke() {
    if (this.timer || !this.alive) return;
    const wait = Math.max(0, REFRESH_MS - (Date.now() - this.last));
    this.timer = setTimeout(() => {
      this.timer = null;
      this.refresh();
    }, wait);
  }

  /** Read the series now (every run's the first time, then the current run's: the kept
   * runs do not change); a call while one is under way asks for one more after it. */
  refresh() {
    if (this.inFlight) {
      this.again = true;
      return this.inFlight;
    }
    this.inFlight = this.load().finally(() => {
      this.inFlight = null;
      if (this.again && this.alive) {
        this.again = false;
        this.poke();
      }
    });
    return this.inFlight;
  }

  async load() {
    this.last = Date.now();
    const current = this.runs?.find((run) => run.current);
    const query = new URLSearchParams({ max_points: String(MAX_POINTS) });
    if (current) query.set("run_id", current.run_id);
    try {
      const answer = await agent(`/tasks/${encodeURIComponent(this.taskId)}/metrics?${query}`);
      if (!this.alive) return;
      const runs = answer?.runs || [];
      this.runs = current ? this.runs.map((run) => (run === current ? runs[0] || run : run)) : runs;
      this.show(this.runs);
    } catch (error) {
      if (!this.alive) return;
      this.reset();
      replace(this.el, error.status === 404 && !error.code
        ? h("p", { class: "muted" }, "This server records no metrics.")
        : errorBox(error.message, "Could not load the metrics."));
    }
  }

  show(runs) {
    const logged = runs.some((run) => Object.keys(run.metrics || {}).length);
    this.showRuns(runs); // runs without metrics still compare by their params
    if (!logged) {
      if (this.mode === "empty") return;
      this.grid.destroy();
      this.grid = new ChartGrid();
      this.mode = "empty";
      replace(this.el, runs.length > 1 ? this.runsEl : null, h("p", { class: "muted", id: "metrics-empty" },
        "No metrics logged. A task logs them with ", h("code", {}, "run.log_metric(name, value, step)"),
        " or JSON lines appended to ", h("code", {}, "$RUNYARD_METRICS_FILE"), "."));
      return;
    }
    this.grid.show(linesByMetric(runs, runLabel));
    if (this.mode !== "charts") {
      this.mode = "charts";
      replace(this.el, this.runsEl, this.grid.el);
    }
  }

  // The runs drawn, each with its colour (the legend across charts) and a box to compare it.
  showRuns(runs) {
    const key = JSON.stringify(runs.map((run) => [run.run_id, run.state, run.current]));
    if (key === this.runsKey) return; // redrawn only when the runs change: ticks survive refreshes
    this.runsKey = key;
    const known = new Set(runs.map((run) => run.run_id));
    for (const id of [...this.picked]) if (!known.has(id)) this.picked.delete(id);
    const link = h("a", { class: "btn btn-small", id: "compare-runs" }, "Compare selected runs");
    let refs = [];
    link.addEventListener("click", (event) => {
      if (refs.length < 2) event.preventDefault();
    });
    const sync = () => {
      refs = runs.filter((run) => this.picked.has(run.run_id)).map((run) => `${this.taskId}@${run.run_id}`);
      link.href = compareHref(refs);
      link.toggleAttribute("aria-disabled", refs.length < 2);
      link.classList.toggle("is-disabled", refs.length < 2);
      link.title = refs.length < 2 ? "Tick two runs or more" : `Compare ${pluralise(refs.length, "run")}`;
    };
    const items = runs.map((run, colour) => {
      const box = h("input", { type: "checkbox", class: "compare-run", value: run.run_id, checked: this.picked.has(run.run_id), "aria-label": `Compare run ${run.run_id}` });
      box.addEventListener("change", () => {
        if (box.checked) this.picked.add(run.run_id);
        else this.picked.delete(run.run_id);
        sync();
      });
      const swatch = h("span", { class: "swatch", "aria-hidden": "true" });
      swatch.style.background = lineColour(colour);
      return h("li", { "data-run-id": run.run_id },
        h("label", {}, box, swatch, h("code", { title: run.run_id }, shortRun(run.run_id)), ` ${run.state}${run.current ? " (current)" : ""}`));
    });
    sync();
    replace(this.runsEl, h("ul", { class: "plain metric-run-list", "aria-label": "Runs drawn" }, items), link);
  }
}
