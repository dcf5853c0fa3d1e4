// The compare view, #/compare?ids=<ref>,<ref>,... (a ref is a task id, optionally
// @<run_id> for an earlier run): GET /api/v1/compare for the params side by side (those that
// differ first, marked) and the metric summaries, then each run's series for overlaid
// charts, one chart per metric and one line per task or run.

import { agent } from "../api.js";
import { ChartGrid, formatValue, lineColour } from "../charts.js";
import { errorBox, h, replace, section, spinner, stateBadge } from "../dom.js";
import { instanceName, jsonText } from "../format.js";
import { routeHref, setTitle, taskHref } from "../ui.js";

export const MIN_REFS = 2;
export const MAX_REFS = 20;
const MAX_POINTS = 1000;

/** The Studio address comparing ``refs`` (task ids, ``id@run_id`` for a given run). */
export function compareHref(refs) {
  return routeHref("compare", { ids: refs.join(",") });
}

/** The refs of a compare address: split on commas, blanks and repeats dropped. */
export function parseRefs(query) {
  const refs = (query.get("ids") || "").split(",").map((ref) => ref.trim()).filter(Boolean);
  return [...new Set(refs)];
}

/** The params rows grouped for display: those that differ first, then the same ones, each
 * group in the order the server gave (by name). */
export function groupParams(rows) {
  return [...rows.filter((row) => row.differs), ...rows.filter((row) => !row.differs)];
}

export function renderCompare(main, _params, query) {
  setTitle("Compare");
  const refs = parseRefs(query);
  const view = new CompareView(main, refs);
  view.start();
  return () => view.stop();
}

const shortRun = (runId) => String(runId || "").slice(0, 8);
const itemLabel = (item) => `${instanceName(item.task_id)} @ ${shortRun(item.run_id)}`;

class CompareView {
  constructor(main, refs) {
    this.main = main;
    this.refs = refs;
    this.alive = true;
    this.grid = new ChartGrid();
  }

  stop() {
    this.alive = false;
    this.grid.destroy();
  }

  async start() {
    const head = h("nav", { class: "crumbs", "aria-label": "Breadcrumb" },
      h("a", { href: "#/tasks" }, "Tasks"), " / ", h("span", { "aria-current": "page" }, "Compare"));
    if (this.refs.length < MIN_REFS || this.refs.length > MAX_REFS) {
      replace(this.main, head, h("h1", {}, "Compare"),
        h("p", { class: "notice", id: "compare-count" },
          `Pick from ${MIN_REFS} to ${MAX_REFS} tasks or runs to compare (${this.refs.length} given): tick them in the `,
          h("a", { href: "#/tasks" }, "task list"), " or in a task's metrics."));
      return;
    }
    replace(this.main, head, h("h1", {}, "Compare"), spinner("Comparing…"));
    try {
      const search = new URLSearchParams(this.refs.map((ref) => ["id", ref]));
      const answer = await agent(`/compare?${search}`);
      if (this.alive) this.build(answer);
    } catch (error) {
      if (this.alive) replace(this.main, head, h("h1", {}, "Compare"), errorBox(error.message, "Could not compare these runs."));
    }
  }

  build(answer) {
    const items = answer.items || [];
    this.chartsSlot = h("div", { id: "compare-charts" }, spinner("Loading the series…"));
    replace(this.main,
      h("nav", { class: "crumbs", "aria-label": "Breadcrumb" },
        h("a", { href: "#/tasks" }, "Tasks"), " / ", h("span", { "aria-current": "page" }, "Compare")),
      h("h1", {}, `Compare ${items.length} runs`),
      section("Params", paramsTable(items, answer.params || [])),
      section("Metrics", metricsTable(items, answer.metrics || [])),
      section("Charts", this.chartsSlot));
    this.loadSeries(items);
  }

  async loadSeries(items) {
    try {
      const answers = await Promise.all(items.map((item) => agent(
        `/tasks/${encodeURIComponent(item.task_id)}/metrics?${new URLSearchParams({ run_id: item.run_id, max_points: String(MAX_POINTS) })}`)));
      if (!this.alive) return;
      const byMetric = {};
      answers.forEach((answer, colour) => {
        const run = (answer?.runs || [])[0];
        for (const [name, series] of Object.entries(run?.metrics || {})) {
          byMetric[name] ||= [];
          byMetric[name].push({ label: itemLabel(items[colour]), steps: series.steps || [], values: series.values || [], colour });
        }
      });
      if (!Object.keys(byMetric).length) {
        replace(this.chartsSlot, h("p", { class: "muted" }, "None of these runs logged a metric."));
        return;
      }
      this.grid.show(byMetric);
      replace(this.chartsSlot, this.grid.el);
    } catch (error) {
      if (this.alive) replace(this.chartsSlot, errorBox(error.message, "Could not load the series."));
    }
  }
}

function itemHeads(items) {
  return items.map((item, i) => {
    const swatch = h("span", { class: "swatch", "aria-hidden": "true" });
    swatch.style.background = lineColour(i);
    return h("th", { scope: "col", "data-task-id": item.task_id, "data-run-id": item.run_id },
      swatch, h("a", { href: taskHref(item.task_id), title: item.task_id }, instanceName(item.task_id)),
      h("div", { class: "small muted" }, h("code", { title: item.run_id }, shortRun(item.run_id)), " ", stateBadge(item.state)));
  });
}

function paramsTable(items, rows) {
  if (!rows.length) return h("p", { class: "muted" }, "None of these runs has params.");
  const grouped = groupParams(rows);
  const differing = rows.filter((row) => row.differs).length;
  return h("div", {},
    h("p", { class: "muted", id: "params-summary" },
      differing ? `${differing} of ${rows.length} params differ; they are listed first.` : "Every param is the same."),
    h("div", { class: "table-wrap" },
      h("table", { class: "table compare-table", id: "compare-params" },
        h("caption", { class: "visually-hidden" }, "Params of each run, those that differ first"),
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Param"), itemHeads(items))),
        h("tbody", {}, grouped.map((row) => h("tr", { "data-param": row.name, "data-differs": String(Boolean(row.differs)), class: row.differs ? "differs" : null },
          h("th", { scope: "row" }, row.name, row.differs ? h("span", { class: "badge differs-mark", title: "Not the same in every run" }, "differs") : null),
          (row.values || []).map((value) => h("td", {}, paramText(value)))))))));
}

function paramText(value) {
  if (value === null || value === undefined) return h("span", { class: "muted" }, "—");
  return h(typeof value === "string" ? "span" : "code", { class: "wrap-anywhere" }, typeof value === "string" ? value : jsonText(value));
}

function metricsTable(items, rows) {
  if (!rows.length) return h("p", { class: "muted" }, "None of these runs logged a metric.");
  return h("div", { class: "table-wrap" },
    h("table", { class: "table compare-table", id: "compare-metrics" },
      h("caption", { class: "visually-hidden" }, "The last value of each metric per run, with its minimum and maximum"),
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Metric (last)"), itemHeads(items))),
      h("tbody", {}, rows.map((row) => h("tr", { "data-metric": row.name },
        h("th", { scope: "row" }, row.name),
        (row.values || []).map((summary) => h("td", { class: "num" }, summaryText(summary))))))));
}

/** A metric summary cell: its last value, then min–max and the last step in small print. */
export function summaryText(summary) {
  if (!summary) return h("span", { class: "muted" }, "—");
  return h("span", { title: `min ${formatValue(summary.min)}, max ${formatValue(summary.max)}, ${summary.count} points, last step ${summary.step}` },
    h("span", { class: "metric-last" }, formatValue(summary.last)),
    h("span", { class: "small muted" }, ` ${formatValue(summary.min)}–${formatValue(summary.max)} · step ${summary.step}`));
}
