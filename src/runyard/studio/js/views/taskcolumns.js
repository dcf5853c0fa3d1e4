// The task list's chosen columns: params and metric summaries, picked in a small menu and
// remembered in this browser (localStorage), each sorted by the server
// (sort=params.<name> / sort=metrics.<name>).

import { h, replace } from "../dom.js";
import { formatValue } from "../charts.js";

const STORAGE_KEY = "runyard.studio.taskColumns";
const KINDS = ["params", "metrics"];
const MAX_COLUMNS = 12;
// a metric name as tracking accepts it; a param name is any text of that length without
// control characters
const NAME_RE = /^[^\u0000-\u001f\u007f]{1,250}$/;
const NOT_PARAMS = new Set(["task_name", "source_tasks"]);

/** Is ``sort`` a tracked column's sort key (``params.<name>`` or ``metrics.<name>``)? */
export function isTrackedSort(sort) {
  const column = parseSort(sort);
  return column !== null;
}

function parseSort(sort) {
  const text = String(sort || "");
  const dot = text.indexOf(".");
  if (dot < 0) return null;
  const kind = text.slice(0, dot);
  const name = text.slice(dot + 1);
  return KINDS.includes(kind) && NAME_RE.test(name) ? { kind, name } : null;
}

const valid = (column) => column && KINDS.includes(column.kind) && typeof column.name === "string" && NAME_RE.test(column.name);

/** The columns this browser chose: [{kind, name}], nothing when unset or unreadable. */
export function loadColumns() {
  try {
    const stored = JSON.parse(localStorage.getItem(STORAGE_KEY) || "[]");
    return Array.isArray(stored) ? stored.filter(valid).slice(0, MAX_COLUMNS).map(({ kind, name }) => ({ kind, name })) : [];
  } catch {
    return []; // storage off (a private window) or a value written by hand: no extra columns
  }
}

function saveColumns(columns) {
  try {
    localStorage.setItem(STORAGE_KEY, JSON.stringify(columns));
  } catch {
    // storage off: the choice holds for this page only
  }
}

/** The header spec of a chosen column, as the task list's fixed columns are described. */
export function columnSpec(column) {
  return {
    label: column.name,
    title: column.kind === "metrics" ? `metric ${column.name} (last value)` : `param ${column.name}`,
    sort: `${column.kind}.${column.name}`,
    first: column.kind === "metrics" ? "desc" : "asc",
    className: "col-tracked num",
    tracked: column,
  };
}

/** A run's params: its inputs (without task_name, source_tasks) updated with what it logged. */
export function runParams(status) {
  const params = Object.fromEntries(Object.entries(status.config || {}).filter(([key]) => !NOT_PARAMS.has(key)));
  return { ...params, ...(status.params && typeof status.params === "object" ? status.params : {}) };
}

/** The text of a chosen column in a status's row ("" when the run has no such value). */
export function cellText(status, column) {
  if (column.kind === "metrics") {
    const summary = (status.metrics || {})[column.name];
    return summary ? formatValue(summary.last) : "";
  }
  const params = runParams(status);
  if (!(column.name in params)) return "";
  const value = params[column.name];
  return typeof value === "string" ? value : typeof value === "number" ? formatValue(value) : JSON.stringify(value);
}

/** The "Columns" menu: a box per param and metric seen on the pages shown so far. */
export class ColumnPicker {
  constructor({ chosen, onChange }) {
    this.chosen = chosen;
    this.onChange = onChange;
    this.seen = { params: new Set(), metrics: new Set() };
    for (const column of chosen) this.seen[column.kind].add(column.name);
    this.body = h("div", { class: "column-picker-body", id: "column-picker-body" });
    this.el = h("details", { class: "column-picker", id: "column-picker" },
      h("summary", { class: "btn", id: "column-picker-toggle" }, "Columns"), this.body);
    this.drawn = "";
    this.draw();
  }

  /** Learn the names the statuses of a page carry; the menu grows, never shrinks. */
  offer(statuses) {
    for (const status of statuses) {
      for (const name of Object.keys(runParams(status))) this.seen.params.add(name);
      for (const name of Object.keys(status.metrics || {})) this.seen.metrics.add(name);
    }
    this.draw();
  }

  isChosen(kind, name) {
    return this.chosen.some((c) => c.kind === kind && c.name === name);
  }

  toggle(kind, name, on) {
    const rest = this.chosen.filter((c) => !(c.kind === kind && c.name === name));
    this.chosen = on ? [...rest, { kind, name }].slice(0, MAX_COLUMNS) : rest;
    saveColumns(this.chosen);
    this.onChange(this.chosen);
    this.draw(true);
  }

  draw(force = false) {
    const key = JSON.stringify(KINDS.map((kind) => [...this.seen[kind]].sort()));
    if (key === this.drawn && !force) return; // redrawn only when names are added: focus survives
    this.drawn = key;
    replace(this.body, KINDS.map((kind) => {
      const names = [...this.seen[kind]].filter((name) => NAME_RE.test(name)).sort();
      return h("fieldset", { "data-kind": kind },
        h("legend", {}, kind === "params" ? "Params" : "Metrics (last value)"),
        names.length ? names.map((name) => {
          const box = h("input", { type: "checkbox", "data-column": `${kind}.${name}`, checked: this.isChosen(kind, name) });
          box.disabled = !box.checked && this.chosen.length >= MAX_COLUMNS;
          box.addEventListener("change", () => this.toggle(kind, name, box.checked));
          return h("label", {}, box, name);
        }) : h("p", { class: "muted small" }, kind === "params" ? "No params on the pages shown yet." : "No metrics on the pages shown yet."));
    }));
  }
}
