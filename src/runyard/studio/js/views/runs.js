// The runs of one task (GET /api/v1/tasks/{id}/runs): its current run and the earlier runs
// a fixed-name rerun or a retry replaced, newest first, with full run ids, states, times and
// errors; each opens a view of that run (runview.js: params, result, files, log).

import { h, stateBadge } from "../dom.js";
import { elapsed, formatDuration, pluralise } from "../format.js";
import { timeElement } from "../times.js";
import { runDetail } from "./runview.js";

const ACTIVE = new Set(["queued", "running"]);

/** A table of `runs` ({run_id, state, created_at, started_at, finished_at, exit_code, error,
 * current}); with `taskId`, each row opens the view of its run below it. */
export function runsTable(runs, taskId = null) {
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
          h("th", { scope: "col", class: "col-opt" }, "Error"),
          taskId ? h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Actions")) : null)),
        h("tbody", {}, runs.map((run) => runRow(run, taskId))))));
}

function runRow(run, taskId) {
  const active = ACTIVE.has(run.state);
  const ms = active || run.finished_at ? elapsed(run.started_at, run.finished_at) : null;
  return h("tr", { "data-run-id": run.run_id, "data-current": String(Boolean(run.current)) },
    h("td", {}, h("code", { class: "wrap-anywhere" }, run.run_id), run.current ? h("span", { class: "badge run-current" }, "current") : null),
    h("td", {}, stateBadge(run.state)),
    h("td", { class: "col-time nowrap" }, timeElement(run.started_at || run.created_at)),
    h("td", { class: "col-time nowrap num" }, formatDuration(ms)),
    h("td", { class: "col-opt num" }, active || run.exit_code === null || run.exit_code === undefined ? "—" : String(run.exit_code)),
    h("td", { class: "col-opt" }, run.error ? h("span", { class: "run-error", title: run.error }, firstLine(run.error)) : ""),
    taskId ? h("td", { class: "cell-actions" }, viewButton(taskId, run)) : null);
}

/** A button that shows (or hides) the view of `run` in a row of its own below its row. */
function viewButton(taskId, run) {
  const button = h("button", { type: "button", class: "btn btn-small run-view", "aria-expanded": "false",
    "aria-label": `View run ${run.run_id}` }, "View");
  let shown = null;
  button.addEventListener("click", () => {
    if (shown) {
      shown.remove();
      shown = null;
    } else {
      shown = h("tr", { class: "run-detail-row" }, h("td", { colspan: "7" }, runDetail(taskId, run.run_id)));
      button.closest("tr").after(shown);
    }
    button.setAttribute("aria-expanded", String(Boolean(shown)));
    button.textContent = shown ? "Hide" : "View";
  });
  return button;
}

function firstLine(text) {
  const line = String(text).split("\n").find((l) => l.trim()) || "";
  return line.length > 120 ? `${line.slice(0, 119)}…` : line;
}
