// The task list: filters (state, type, task definition, text), columns sorted by the server
// (GET /api/v1/tasks?sort=&order=), a total for the filter, paging by cursor, live states
// (the visible page is re-read every second; rows update in place) and bulk cancel/delete.

import { agent, jobAnswer } from "../api.js";
import { errorBox, h, onActivate, replace, setText, stateBadge } from "../dom.js";
import { elapsed, formatDuration, instanceName } from "../format.js";
import { timeElement } from "../times.js";
import { navigate, replaceQuery, setTitle, taskHref } from "../ui.js";
import { BulkActions } from "./bulk.js";
import { cellText, ColumnPicker, columnSpec, isTrackedSort, loadColumns } from "./taskcolumns.js";

export const TASK_STATES = ["queued", "running", "succeeded", "failed", "cancelled"];
export const TASK_TYPES = ["base", "etl", "train", "predict", "backtest", "analysis", "inference"];
const PAGE_SIZES = [25, 50, 100, 200];
const LIVE_MS = 1000;
const NAME_RE = /^[A-Za-z0-9_.-]{1,100}$/;

// The sortable columns: header label, server sort key, the order a first click asks for.
const COLUMNS = [
  { label: "State", sort: "state", first: "asc" },
  { label: "Type", sort: "task_type", first: "asc", className: "col-opt" },
  { label: "Task", sort: "task_name", first: "asc", className: "col-narrow-hide" },
  { label: "Name", sort: "task_id", first: "asc" },
  { label: "Created", sort: "created_at", first: "desc", className: "col-time" },
  { label: "Duration", sort: "duration", first: "desc", className: "col-time" },
];
const SORTS = new Set(COLUMNS.map((c) => c.sort));

/** Does a status match a free-text filter (id, registered name, instance name, error, config)? */
export function matchesText(status, text) {
  if (!text) return true;
  const needle = text.toLowerCase();
  const haystack = [status.task_id, status.task_name, status.error, JSON.stringify(status.config || {})];
  return haystack.some((value) => String(value || "").toLowerCase().includes(needle));
}

export function renderTasks(main, _params, query) {
  setTitle("Tasks");
  const asked = query.get("sort");
  const sort = SORTS.has(asked) || isTrackedSort(asked) ? asked : "created_at";
  const filters = {
    state: TASK_STATES.includes(query.get("state")) ? query.get("state") : "",
    type: TASK_TYPES.includes(query.get("type")) ? query.get("type") : "",
    task: NAME_RE.test(query.get("task") || "") ? query.get("task") : "",
    q: query.get("q") || "",
    size: PAGE_SIZES.includes(Number(query.get("size"))) ? Number(query.get("size")) : 50,
    sort,
    order: query.get("order") === "asc" || query.get("order") === "desc" ? query.get("order") : "desc",
  };
  const view = new TaskList(main, filters);
  view.start();
  return () => view.stop();
}

class TaskList {
  constructor(main, filters) {
    this.main = main;
    this.filters = filters;
    this.cursors = [null];
    this.page = 0;
    this.rows = new Map();
    this.nextCursor = null;
    this.alive = true;
    this.loading = false;
    this.bulk = new BulkActions({ onDone: () => this.load({ quiet: true }) });
    this.columns = withSortColumn(loadColumns(), filters.sort);
    this.picker = new ColumnPicker({ chosen: this.columns, onChange: (columns) => this.setColumns(columns) });
    this.build();
  }

  build() {
    const stateSelect = select("filter-state", "State", ["", ...TASK_STATES], this.filters.state, "All states");
    const typeSelect = select("filter-type", "Type", ["", ...TASK_TYPES], this.filters.type, "All types");
    const taskSelect = select("filter-task", "Task", ["", ...(this.filters.task ? [this.filters.task] : [])], this.filters.task, "All tasks");
    this.taskSelect = taskSelect.select;
    const sizeSelect = select("page-size", "Per page", PAGE_SIZES.map(String), String(this.filters.size));
    const text = h("input", {
      id: "filter-text", type: "search", value: this.filters.q, placeholder: "id, name, config…",
      autocomplete: "off", spellcheck: "false",
    });
    this.textInput = text;
    text.addEventListener("input", () => {
      clearTimeout(this.debounce);
      this.debounce = setTimeout(() => this.setFilter("q", text.value.trim()), 250);
    });
    stateSelect.select.addEventListener("change", () => this.setFilter("state", stateSelect.select.value));
    typeSelect.select.addEventListener("change", () => this.setFilter("type", typeSelect.select.value));
    taskSelect.select.addEventListener("change", () => this.setFilter("task", taskSelect.select.value));
    sizeSelect.select.addEventListener("change", () => this.setFilter("size", Number(sizeSelect.select.value)));

    this.summary = h("p", { class: "muted", id: "tasks-summary", role: "status" });
    this.message = h("div");
    this.tbody = h("tbody");
    this.headRow = h("tr", {}, h("th", { scope: "col", class: "col-check" }, this.bulk.pageBox));
    this.headers = [...COLUMNS, ...this.columns.map(columnSpec)].map((column) => this.header(column));
    this.headRow.append(...this.headers.map((x) => x.th));
    this.prev = h("button", { type: "button", class: "btn", onclick: () => this.turn(-1) }, "← Previous");
    this.next = h("button", { type: "button", class: "btn", onclick: () => this.turn(1) }, "Next →");
    this.pageLabel = h("span", { class: "muted", "aria-live": "polite" });
    this.main.append(
      h("div", { class: "page-head" },
        h("h1", {}, "Tasks"),
        h("div", { class: "actions" }, this.picker.el, h("a", { class: "btn btn-primary", href: "#/submit" }, "Submit a task"))),
      h("form", { class: "filters", role: "search", "aria-label": "Filter tasks", onsubmit: (e) => e.preventDefault() },
        stateSelect.field, typeSelect.field, taskSelect.field,
        h("div", { class: "field field-grow" }, h("label", { for: "filter-text" }, "Search"), text),
        sizeSelect.field),
      this.summary,
      this.bulk.bar,
      this.message,
      h("div", { class: "table-wrap" },
        h("table", { class: "table tasks-table", id: "tasks-table" },
          h("caption", { class: "visually-hidden" }, "Tasks"),
          h("thead", {}, this.headRow),
          this.tbody)),
      h("nav", { class: "pager", "aria-label": "Pages" }, this.prev, this.pageLabel, this.next),
    );
    this.showSort();
    this.loadDefinitions();
  }

  header(column) {
    const button = h("button", { type: "button", class: "sort-button", "data-sort": column.sort }, column.label,
      h("span", { class: "sort-mark", "aria-hidden": "true" }));
    button.addEventListener("click", () => this.sortBy(column));
    return { column, button, th: h("th", { scope: "col", class: column.className || null, "data-column": column.tracked ? column.sort : null }, button) };
  }

  /** Show the chosen param and metric columns: headers and rows are built again. */
  setColumns(columns) {
    this.columns = columns;
    for (const { th } of this.headers.slice(COLUMNS.length)) th.remove();
    this.headers = [...this.headers.slice(0, COLUMNS.length), ...columns.map((column) => this.header(columnSpec(column)))];
    this.headRow.append(...this.headers.slice(COLUMNS.length).map((x) => x.th));
    for (const row of this.rows.values()) row.tr.remove();
    this.rows.clear();
    if (isTrackedSort(this.filters.sort) && !this.headers.some((x) => x.column.sort === this.filters.sort)) {
      this.filters.sort = "created_at";
      this.filters.order = "desc";
    }
    this.showSort();
    this.restart();
  }

  showSort() {
    for (const { column, button, th } of this.headers) {
      const active = column.sort === this.filters.sort;
      const order = active ? this.filters.order : null;
      th.setAttribute("aria-sort", order === "asc" ? "ascending" : order === "desc" ? "descending" : "none");
      button.querySelector(".sort-mark").textContent = order === "asc" ? " ▲" : order === "desc" ? " ▼" : "";
      button.title = column.tracked ? `Sort by ${column.title}` : `Sort by ${column.label.toLowerCase()}`;
    }
  }

  sortBy(column) {
    const same = this.filters.sort === column.sort;
    const order = same ? (this.filters.order === "asc" ? "desc" : "asc") : column.first;
    this.filters.sort = column.sort;
    this.filters.order = order;
    this.showSort();
    this.restart();
  }

  async loadDefinitions() {
    try {
      const definitions = await jobAnswer("list_installed_task_definitions");
      const names = [...new Set(definitions.map((d) => d.name).concat(this.filters.task ? [this.filters.task] : []))].sort();
      if (!this.alive) return;
      replace(this.taskSelect, ["", ...names].map((value) =>
        h("option", { value, selected: value === this.filters.task }, value || "All tasks")));
    } catch {
      // the filter keeps "All tasks" (and a name from the link); the list itself still works
    }
  }

  start() {
    this.load();
    this.timer = setInterval(() => this.tick(), 250);
    this.lastRefresh = Date.now();
  }

  stop() {
    this.alive = false;
    clearTimeout(this.debounce);
    clearInterval(this.timer);
    this.abort?.abort();
  }

  tick() {
    if (Date.now() - (this.lastDurations || 0) >= 1000) {
      this.lastDurations = Date.now();
      for (const row of this.rows.values()) row.updateDuration();
    }
    if (document.visibilityState === "visible" && !this.loading && !this.bulk.busy && Date.now() - this.lastRefresh >= LIVE_MS) {
      this.load({ quiet: true });
    }
  }

  setFilter(key, value) {
    // typing not yet applied counts too, so a select change never uses a stale search
    clearTimeout(this.debounce);
    const q = this.textInput.value.trim();
    if (this.filters[key] === value && this.filters.q === q) return;
    this.filters[key] = value;
    this.filters.q = key === "q" ? value : q;
    this.restart();
  }

  restart() {
    this.cursors = [null];
    this.page = 0;
    const f = this.filters;
    replaceQuery({
      ...f, size: f.size === 50 ? "" : f.size,
      sort: f.sort === "created_at" && f.order === "desc" ? "" : f.sort,
      order: f.sort === "created_at" && f.order === "desc" ? "" : f.order,
    });
    this.load();
  }

  turn(delta) {
    const page = this.page + delta;
    if (page < 0 || (delta > 0 && !this.nextCursor)) return;
    if (delta > 0) this.cursors[page] = this.nextCursor;
    this.page = page;
    this.load().then(() => this.tbody.querySelector("tr")?.focus());
  }

  async load({ quiet = false } = {}) {
    this.abort?.abort();
    const abort = new AbortController();
    this.abort = abort;
    this.loading = true;
    if (!quiet) this.summary.textContent = "Loading…";
    try {
      const answer = await agent(`/tasks?${this.query()}`, { signal: abort.signal });
      if (!this.alive || abort.signal.aborted) return;
      this.nextCursor = answer.next_cursor || null;
      this.show(answer.items || [], answer.total ?? 0);
      replace(this.message);
    } catch (error) {
      if (abort.signal.aborted || !this.alive) return;
      setText(this.summary, "");
      replace(this.message, errorBox(error.message, "Could not load tasks."));
    } finally {
      if (this.abort === abort) {
        this.loading = false;
        this.lastRefresh = Date.now();
      }
    }
  }

  query() {
    const f = this.filters;
    const params = new URLSearchParams({ limit: String(f.size), sort: f.sort, order: f.order });
    if (f.state) params.set("state", f.state);
    if (f.type) params.set("task_type", f.type);
    if (f.task) params.set("task", f.task);
    if (f.q) params.set("text", f.q);
    const cursor = this.cursors[this.page];
    if (cursor) params.set("cursor", cursor);
    return params.toString();
  }

  show(items, total) {
    const seen = new Set();
    const ordered = items.map((status) => {
      seen.add(status.task_id);
      let row = this.rows.get(status.task_id);
      if (row) row.update(status);
      else {
        row = new TaskRow(status, this.bulk, this.columns);
        this.rows.set(status.task_id, row);
      }
      return row.tr;
    });
    for (const [id, row] of this.rows) {
      if (!seen.has(id)) {
        row.tr.remove();
        this.rows.delete(id);
      }
    }
    this.bulk.setPage(items);
    this.picker.offer(items);
    this.tbody.querySelector(".empty-row")?.remove();
    const current = [...this.tbody.children];
    if (current.length !== ordered.length || current.some((tr, i) => tr !== ordered[i])) {
      this.tbody.append(...ordered);
    }
    if (!items.length) {
      this.tbody.append(h("tr", { class: "empty-row" }, h("td", { colspan: COLUMNS.length + this.columns.length + 1, class: "empty" }, this.emptyText())));
    }
    this.summarise(items.length, total);
  }

  emptyText() {
    const f = this.filters;
    if (f.state || f.type || f.task || f.q) return "No tasks match these filters.";
    return this.page ? "No more tasks." : "No tasks yet — submit one to get started.";
  }

  summarise(count, total) {
    const first = count ? this.page * this.filters.size + 1 : 0;
    const range = count ? `${first}–${first + count - 1}` : "none";
    const f = this.filters;
    const noun = f.state || f.type || f.task || f.q ? "matching" : "in all";
    setText(this.summary, `${total} ${total === 1 ? "task" : "tasks"} ${noun} · showing ${range} · states update live`);
    setText(this.pageLabel, `Page ${this.page + 1} of ${Math.max(1, Math.ceil(total / this.filters.size))}`);
    this.prev.disabled = this.page === 0;
    this.next.disabled = !this.nextCursor;
  }
}

class TaskRow {
  constructor(status, bulk, columns = []) {
    const id = status.task_id;
    this.check = bulk.rowBox(id);
    this.state = h("td", { class: "cell-state" });
    this.type = h("td", { class: "col-opt" });
    this.task = h("td", { class: "col-narrow-hide" });
    this.name = h("td", { class: "cell-name" },
      h("a", { href: taskHref(id), tabindex: "-1", title: id }, instanceName(id)));
    this.created = h("td", { class: "col-time nowrap" });
    this.duration = h("td", { class: "col-time nowrap num" });
    this.tracked = columns.map((column) => ({ column, td: h("td", { class: "col-tracked num", "data-column": `${column.kind}.${column.name}` }) }));
    this.tr = h("tr", { tabindex: "0", class: "row-link", "data-task-id": id },
      h("td", { class: "col-check" }, this.check), this.state, this.type, this.task, this.name, this.created, this.duration,
      this.tracked.map((x) => x.td));
    onActivate(this.tr, () => navigate(taskHref(id)));
    this.update(status);
  }

  update(status) {
    const previous = this.status;
    this.status = status;
    if (previous?.state !== status.state) {
      replace(this.state, stateBadge(status.state));
      this.tr.dataset.state = status.state;
      this.tr.setAttribute("aria-label", `${instanceName(status.task_id)}, ${status.task_name}, ${status.state}`);
    }
    setText(this.type, status.task_type);
    setText(this.task, status.task_name);
    if (previous?.created_at !== status.created_at) replace(this.created, timeElement(status.created_at));
    for (const { column, td } of this.tracked) setText(td, cellText(status, column));
    this.updateDuration();
  }

  updateDuration() {
    const s = this.status;
    const ms = isActive(s.state) || s.finished_at ? elapsed(s.started_at, s.finished_at) : null;
    setText(this.duration, formatDuration(ms));
  }
}

/** The chosen columns, plus the one a link sorts by when it is not among them (shown, not
 * remembered), so the order of the rows is never a column that cannot be seen. */
function withSortColumn(columns, sort) {
  const dot = sort.indexOf(".");
  if (!isTrackedSort(sort) || columns.some((c) => `${c.kind}.${c.name}` === sort)) return columns;
  return [...columns, { kind: sort.slice(0, dot), name: sort.slice(dot + 1) }];
}

export function isActive(state) {
  return state === "queued" || state === "running";
}

function select(id, label, values, current, emptyLabel = "") {
  const el = h("select", { id },
    values.map((value) => h("option", { value, selected: value === current }, value || emptyLabel)));
  return { select: el, field: h("div", { class: "field" }, h("label", { for: id }, label), el) };
}
