// One run of a task, the current one or an earlier one a rerun or a retry replaced (GET
// /api/v1/tasks/{id}/runs/{run_id}): its params, result, files (each downloadable by run
// id) and the tail of its log (read_task_log with run_id). Every value is text here.

import { agent, encodePath, jobAnswer } from "../api.js";
import { errorBox, h, replace, spinner } from "../dom.js";
import { fileTable } from "./files.js";

const LOG_BYTES = 65536;

export const taskRunFileUrl = (taskId, runId, path) =>
  `/api/v1/tasks/${encodeURIComponent(taskId)}/runs/${encodeURIComponent(runId)}/files/${encodePath(path)}`;

/** The view of run `runId` of `taskId`: a spinner, filled once the run is read. */
export function runDetail(taskId, runId) {
  const el = h("div", { class: "run-detail", id: `run-detail-${runId}`, "data-run-id": runId },
    spinner("Loading the run…"));
  load(el, taskId, runId);
  return el;
}

async function load(el, taskId, runId) {
  try {
    const run = await agent(`/tasks/${encodeURIComponent(taskId)}/runs/${encodeURIComponent(runId)}`);
    let log = null;
    try {
      log = await jobAnswer("read_task_log", { task_id: taskId, run_id: runId, offset: -1, limit: LOG_BYTES });
    } catch {
      log = null; // no log kept for that run: the rest still shows
    }
    replace(el, ...runParts(taskId, run, log));
  } catch (error) {
    replace(el, errorBox(error.message, "Could not load the run."));
  }
}

function runParts(taskId, run, log) {
  const files = (run.files || []).map((file) => ({
    name: file.path, path: file.path, size: file.size, sha256: file.sha256,
    url: taskRunFileUrl(taskId, run.run_id, file.path),
  }));
  return [
    h("h4", {}, "Params"),
    paramsTable(run.params || {}),
    h("h4", {}, "Result"),
    h("pre", { class: "run-result" }, JSON.stringify(run.result || {}, null, 2)),
    h("h4", {}, "Files"),
    fileTable(files, { caption: `Files of run ${run.run_id}`, emptyText: "It left no files.", id: `run-files-${run.run_id}` }),
    h("h4", {}, "Log"),
    log ? h("pre", { class: "log run-log" }, log.content || "(empty)") : h("p", { class: "muted" }, "No log kept for this run."),
  ];
}

function paramsTable(params) {
  const names = Object.keys(params).sort();
  if (!names.length) return h("p", { class: "muted" }, "No params.");
  return h("div", { class: "table-wrap" },
    h("table", { class: "table run-params" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Param"), h("th", { scope: "col" }, "Value"))),
      h("tbody", {}, names.map((name) =>
        h("tr", { "data-param": name }, h("td", {}, h("code", {}, name)), h("td", {}, valueText(params[name])))))));
}

function valueText(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}
