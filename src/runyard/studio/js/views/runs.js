// The runs of one task (GET /api/v1/tasks/{id}/runs): its current run and the earlier runs
// a fixed-name rerun replaced, newest first, with full run ids, states, times and errors.

import { h, stateBadge } from "../dom.js";
import { elapsed, formatDuration, pluralise } from "../format.js";
import { timeElement } from "../times.js";

const ACTIVE = new Set(["queued", "running"]);

/** A table of `runs` ({run_id, state, created_at, started_at, finished_at, exit_code, error, current}). */
export function runsTable(runs) {
  if (!runs.length) return h("p", { class: "muted" }, "No runs recorded.");
  const earlier = runs.filter((r) => !r.current).length;
  return h("div", {},
    h("p", { class: "muted", id: "runs-summary" },
      earlier ? `${pluralise(runs.length, "run")}: the current one and ${pluralise(earlier, "earlier run")} it replaced.` : "Only this run so far."),
    h("div", { class: "table-wrap" },
      h("table", { class: "table runs-table", id: "runs-history" },
        h("caption", { class: "visually-hidden" }, "Runs of this task, newest first"),
        h("thead", {}, h("tr", {},
          h("th", { scope: "col" }, "Run id"),
          h("th", { scope: "col" }, "State"),
          h("th", { scope: "col", class: "col-time" }, "Started"),
          h("th", { scope: "col", class: "col-time" }, "Duration"),
          h("th", { scope: "col", class: "col-opt num" }, "Exit"),
          h("th", { scope: "col", class: "col-opt" }, "Error"))),
        h("tbody", {}, runs.map(runRow)))));
}

function runRow(run) {
  const active = ACTIVE.has(run.state);
  const ms = active || run.finished_at ? elapsed(run.started_at, run.finished_at) : null;
  return h("tr", { "data-run-id": run.run_id, "data-current": String(Boolean(run.current)) },
    h("td", {}, h("code", { class: "wrap-anywhere" }, run.run_id), run.current ? h("span", { class: "badge run-current" }, "current") : null),
    h("td", {}, stateBadge(run.state)),
    h("td", { class: "col-time nowrap" }, timeElement(run.started_at || run.created_at)),
    h("td", { class: "col-time nowrap num" }, formatDuration(ms)),
    h("td", { class: "col-opt num" }, active || run.exit_code === null || run.exit_code === undefined ? "—" : String(run.exit_code)),
    h("td", { class: "col-opt" }, run.error ? h("span", { class: "run-error", title: run.error }, firstLine(run.error)) : ""));
}

function firstLine(text) {
  const line = String(text).split("\n").find((l) => l.trim()) || "";
  return line.length > 120 ? `${line.slice(0, 119)}…` : line;
}
