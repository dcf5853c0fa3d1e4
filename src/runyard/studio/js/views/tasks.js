// The task list: state/type/text filters, server-side paging (limit + cursor) and live
// states (the visible page is re-read every couple of seconds; rows update in place).

import { catalogue, job } from "../api.js";
import { errorBox, h, onActivate, replace, setText, stateBadge } from "../dom.js";
import { elapsed, formatDuration, formatTime, instanceName } from "../format.js";
import { navigate, replaceQuery, setTitle, taskHref } from "../ui.js";

export const TASK_STATES = ["queued", "running", "succeeded", "failed", "cancelled"];
export const TASK_TYPES = ["base", "etl", "train", "predict", "backtest", "analysis", "inference"];
const PAGE_SIZES = [25, 50, 100, 200];
const LIVE_MS = 1000;
const SCAN_LIVE_MS = 5000;
const MAX_SCAN_CHUNKS = 20;

let textArgument; // name of a server-side text filter argument, when the server has one

async function serverTextArgument() {
  if (textArgument === undefined) {
    try {
      const jobs = await catalogue();
      const props = jobs.find((j) => j.name === "list_task_statuses")?.input_schema?.properties || {};
      textArgument = ["text", "q", "search"].find((name) => name in props) || null;
    } catch {
      textArgument = null;
    }
  }
  return textArgument;
}

/** Does a status match a free-text filter (id, registered name, instance name, error, config)? */
export function matchesText(status, text) {
  if (!text) return true;
  const needle = text.toLowerCase();
  const haystack = [status.task_id, status.task_name, status.error, JSON.stringify(status.config || {})];
  return haystack.some((value) => String(value || "").toLowerCase().includes(needle));
}

export function renderTasks(main, _params, query) {
  setTitle("Tasks");
  const filters = {
    state: TASK_STATES.includes(query.get("state")) ? query.get("state") : "",
    type: TASK_TYPES.includes(query.get("type")) ? query.get("type") : "",
    q: query.get("q") || "",
    size: PAGE_SIZES.includes(Number(query.get("size"))) ? Number(query.get("size")) : 50,
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
    this.scanned = 0;
    this.alive = true;
    this.loading = false;
    this.build();
  }

  build() {
    const stateSelect = select("filter-state", "State", ["", ...TASK_STATES], this.filters.state, "All states");
    const typeSelect = select("filter-type", "Type", ["", ...TASK_TYPES], this.filters.type, "All types");
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
    sizeSelect.select.addEventListener("change", () => this.setFilter("size", Number(sizeSelect.select.value)));

    this.summary = h("p", { class: "muted", id: "tasks-summary", role: "status" });
    this.message = h("div");
    this.tbody = h("tbody");
    this.prev = h("button", { type: "button", class: "btn", onclick: () => this.turn(-1) }, "← Newer");
    this.next = h("button", { type: "button", class: "btn", onclick: () => this.turn(1) }, "Older →");
    this.pageLabel = h("span", { class: "muted", "aria-live": "polite" });
    this.main.append(
      h("div", { class: "page-head" },
        h("h1", {}, "Tasks"),
        h("a", { class: "btn btn-primary", href: "#/submit" }, "Submit a task")),
      h("form", { class: "filters", role: "search", "aria-label": "Filter tasks", onsubmit: (e) => e.preventDefault() },
        stateSelect.field, typeSelect.field,
        h("div", { class: "field field-grow" }, h("label", { for: "filter-text" }, "Search"), text),
        sizeSelect.field),
      this.summary,
      this.message,
      h("div", { class: "table-wrap" },
        h("table", { class: "table tasks-table", id: "tasks-table" },
          h("caption", { class: "visually-hidden" }, "Tasks, newest first"),
          h("thead", {}, h("tr", {},
            h("th", { scope: "col" }, "State"),
            h("th", { scope: "col", class: "col-opt" }, "Type"),
            h("th", { scope: "col" }, "Task"),
            h("th", { scope: "col" }, "Name"),
            h("th", { scope: "col", class: "col-opt-2" }, "Created"),
            h("th", { scope: "col", class: "col-opt" }, "Duration"))),
          this.tbody)),
      h("nav", { class: "pager", "aria-label": "Pages" }, this.prev, this.pageLabel, this.next),
    );
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
    const period = this.filters.q && !textArgument ? SCAN_LIVE_MS : LIVE_MS;
    if (document.visibilityState === "visible" && !this.loading && Date.now() - this.lastRefresh >= period) {
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
    this.cursors = [null];
    this.page = 0;
    replaceQuery({ ...this.filters, size: this.filters.size === 50 ? "" : this.filters.size });
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
      const { items, nextCursor, scanned, serverText } = await this.fetchPage(abort.signal);
      if (!this.alive || abort.signal.aborted) return;
      this.nextCursor = nextCursor;
      this.scanned = scanned;
      this.show(items, serverText);
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

  async fetchPage(signal) {
    const base = { limit: this.filters.size };
    if (this.filters.state) base.state = this.filters.state;
    if (this.filters.type) base.task_type = this.filters.type;
    const cursor = this.cursors[this.page];
    const text = this.filters.q;
    const serverText = text ? await serverTextArgument() : null;
    if (!text || serverText) {
      const args = { ...base, ...(cursor ? { cursor } : {}), ...(serverText ? { [serverText]: text } : {}) };
      const reply = await job("list_task_statuses", args, { signal });
      if (!reply.success) throw new Error(String(reply.answer));
      return { items: reply.answer, nextCursor: reply.metadata?.next_cursor || null, scanned: reply.answer.length, serverText: true };
    }
    return this.scan(base, cursor, text, signal);
  }

  // Without a server-side text filter, read pages until one page's worth of tasks match.
  async scan(base, cursor, text, signal) {
    const items = [];
    let next = cursor;
    let scanned = 0;
    for (let chunk = 0; chunk < MAX_SCAN_CHUNKS; chunk++) {
      const args = { ...base, ...(next ? { cursor: next } : {}) };
      const reply = await job("list_task_statuses", args, { signal });
      if (!reply.success) throw new Error(String(reply.answer));
      scanned += reply.answer.length;
      items.push(...reply.answer.filter((status) => matchesText(status, text)));
      next = reply.metadata?.next_cursor || null;
      if (!next || items.length >= base.limit) break;
    }
    return { items, nextCursor: next, scanned, serverText: false };
  }

  show(items, serverText) {
    const seen = new Set();
    const ordered = items.map((status) => {
      seen.add(status.task_id);
      let row = this.rows.get(status.task_id);
      if (row) row.update(status);
      else {
        row = new TaskRow(status);
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
    this.tbody.querySelector(".empty-row")?.remove();
    const current = [...this.tbody.children];
    if (current.length !== ordered.length || current.some((tr, i) => tr !== ordered[i])) {
      this.tbody.append(...ordered);
    }
    if (!items.length) {
      this.tbody.append(h("tr", { class: "empty-row" }, h("td", { colspan: 6, class: "empty" }, this.emptyText())));
    }
    this.summarise(items.length, serverText);
  }

  emptyText() {
    const filtered = this.filters.state || this.filters.type || this.filters.q;
    if (filtered) return "No tasks match these filters on this page.";
    return this.page ? "No older tasks." : "No tasks yet — submit one to get started.";
  }

  summarise(count, serverText) {
    const bits = [`${count} ${count === 1 ? "task" : "tasks"} shown`, "states update live"];
    if (this.filters.q && !serverText) bits.push(`text filter checked ${this.scanned} tasks`);
    setText(this.summary, bits.join(" · "));
    setText(this.pageLabel, `Page ${this.page + 1}`);
    this.prev.disabled = this.page === 0;
    this.next.disabled = !this.nextCursor;
  }
}

class TaskRow {
  constructor(status) {
    const id = status.task_id;
    this.state = h("td", { class: "cell-state" });
    this.type = h("td", { class: "col-opt" });
    this.task = h("td");
    this.name = h("td", { class: "cell-name" },
      h("a", { href: taskHref(id), tabindex: "-1", title: id }, instanceName(id)));
    this.created = h("td", { class: "col-opt-2 nowrap" });
    this.duration = h("td", { class: "col-opt nowrap num" });
    this.tr = h("tr", { tabindex: "0", class: "row-link", "data-task-id": id },
      this.state, this.type, this.task, this.name, this.created, this.duration);
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
    if (previous?.created_at !== status.created_at) {
      replace(this.created, h("time", { datetime: status.created_at, title: status.created_at },
        formatTime(status.created_at)));
    }
    this.updateDuration();
  }

  updateDuration() {
    const s = this.status;
    const ms = isActive(s.state) || s.finished_at ? elapsed(s.started_at, s.finished_at) : null;
    setText(this.duration, formatDuration(ms));
  }
}

export function isActive(state) {
  return state === "queued" || state === "running";
}

function select(id, label, values, current, emptyLabel = "") {
  const el = h("select", { id },
    values.map((value) => h("option", { value, selected: value === current }, value || emptyLabel)));
  return { select: el, field: h("div", { class: "field" }, h("label", { for: id }, label), el) };
}
