// Bulk actions of the task list: a checkbox per row, one to select the whole page, and
// "Cancel" / "Delete" for the selection after a confirm step. They use the same Task Job API
// calls as the task page (cancel, delete_tasks), one task at a time for cancel, and report
// the outcome per task: a running task is cancelled, never deleted.

import { jobAnswer } from "../api.js";
import { h, replace } from "../dom.js";
import { instanceName, pluralise } from "../format.js";
import { confirmAction, toast } from "../ui.js";
import { compareHref, MAX_REFS, MIN_REFS } from "./compare.js";

const ACTIVE = new Set(["queued", "running"]);

export class BulkActions {
  constructor({ onDone }) {
    this.onDone = onDone;
    this.selected = new Map(); // task id -> its latest status on this page
    this.page = [];
    this.boxes = new Map();
    this.busy = false;
    this.pageBox = h("input", { type: "checkbox", id: "select-page", "aria-label": "Select all tasks on this page" });
    this.pageBox.addEventListener("change", () => this.selectPage(this.pageBox.checked));
    this.count = h("span", { id: "bulk-count", "aria-live": "polite" });
    this.cancelButton = h("button", { type: "button", class: "btn btn-small", id: "bulk-cancel" }, "Cancel selected");
    this.deleteButton = h("button", { type: "button", class: "btn btn-small btn-danger", id: "bulk-delete" }, "Delete selected");
    this.clearButton = h("button", { type: "button", class: "btn btn-small", id: "bulk-clear" }, "Clear selection");
    this.compareLink = h("a", { class: "btn btn-small", id: "bulk-compare" }, "Compare selected");
    this.compareLink.addEventListener("click", (event) => {
      if (!comparable(this.selected.size)) event.preventDefault();
    });
    this.cancelButton.addEventListener("click", () => this.run("cancel"));
    this.deleteButton.addEventListener("click", () => this.run("delete"));
    this.clearButton.addEventListener("click", () => this.clear());
    this.report = h("div", { id: "bulk-report" });
    this.bar = h("div", { class: "bulk" },
      h("div", { class: "bulk-bar actions", role: "group", "aria-label": "Selected tasks", hidden: true },
        this.count, this.compareLink, this.cancelButton, this.deleteButton, this.clearButton),
      this.report);
    this.barRow = this.bar.firstChild;
  }

  /** The checkbox of one row. */
  rowBox(taskId) {
    const box = h("input", { type: "checkbox", class: "row-check", "aria-label": `Select ${instanceName(taskId)}` });
    box.checked = this.selected.has(taskId);
    box.addEventListener("change", () => {
      const status = this.page.find((s) => s.task_id === taskId);
      if (box.checked && status) this.selected.set(taskId, status);
      else this.selected.delete(taskId);
      this.refresh();
    });
    this.boxes.set(taskId, box);
    return box;
  }

  /** The statuses now shown: the selection keeps only rows of this page, with fresh states. */
  setPage(statuses) {
    this.page = statuses;
    const shown = new Map(statuses.map((s) => [s.task_id, s]));
    for (const id of [...this.selected.keys()]) {
      if (shown.has(id)) this.selected.set(id, shown.get(id));
      else this.selected.delete(id);
    }
    for (const id of [...this.boxes.keys()]) if (!shown.has(id)) this.boxes.delete(id);
    this.refresh();
  }

  selectPage(on) {
    this.selected.clear();
    if (on) for (const status of this.page) this.selected.set(status.task_id, status);
    this.refresh();
  }

  clear() {
    this.selectPage(false);
  }

  refresh() {
    for (const [id, box] of this.boxes) box.checked = this.selected.has(id);
    const n = this.selected.size;
    this.pageBox.checked = n > 0 && n === this.page.length;
    this.pageBox.indeterminate = n > 0 && n < this.page.length;
    this.barRow.hidden = n === 0;
    this.count.textContent = `${pluralise(n, "task")} selected`;
    const statuses = [...this.selected.values()];
    this.cancelButton.disabled = this.busy || !statuses.some((s) => ACTIVE.has(s.state));
    this.deleteButton.disabled = this.busy || !statuses.some((s) => !ACTIVE.has(s.state));
    const ok = comparable(n);
    this.compareLink.href = compareHref([...this.selected.keys()]);
    this.compareLink.classList.toggle("is-disabled", !ok);
    this.compareLink.toggleAttribute("aria-disabled", !ok);
    this.compareLink.title = ok ? "Params side by side, metrics overlaid" : `Select from ${MIN_REFS} to ${MAX_REFS} tasks to compare`;
  }

  async run(action) {
    const statuses = [...this.selected.values()];
    const ok = await confirmAction(action === "cancel" ? cancelText(statuses) : deleteText(statuses));
    if (!ok) return;
    this.busy = true;
    this.refresh();
    try {
      const outcomes = action === "cancel" ? await cancelAll(statuses) : await deleteAll(statuses);
      this.show(action, outcomes);
      this.clear();
    } catch (error) {
      toast(error.message, "error");
    } finally {
      this.busy = false;
      this.refresh();
      this.onDone();
    }
  }

  show(action, outcomes) {
    const done = outcomes.filter((o) => o.ok).length;
    const title = `${action === "cancel" ? "Cancelled" : "Deleted"} ${done} of ${pluralise(outcomes.length, "task")}.`;
    replace(this.report, h("div", { class: `alert ${done === outcomes.length ? "alert-info" : "alert-warn"}`, role: "status" },
      h("strong", {}, title),
      h("ul", { class: "bulk-outcomes" }, outcomes.map((o) =>
        h("li", { "data-task-id": o.taskId, "data-ok": String(o.ok) }, h("code", {}, instanceName(o.taskId)), `: ${o.message}`)))));
  }
}

const comparable = (n) => n >= MIN_REFS && n <= MAX_REFS;

function cancelText(statuses) {
  const active = statuses.filter((s) => ACTIVE.has(s.state));
  const rest = statuses.length - active.length;
  return {
    title: `Cancel ${pluralise(active.length, "task")}?`,
    text: `${pluralise(active.length, "queued or running task")} will be stopped and marked cancelled.` +
      (rest ? ` ${pluralise(rest, "selected task")} already finished and ${rest === 1 ? "is" : "are"} left as ${rest === 1 ? "it is" : "they are"}.` : ""),
    confirmLabel: "Cancel tasks",
  };
}

function deleteText(statuses) {
  const finished = statuses.filter((s) => !ACTIVE.has(s.state));
  const active = statuses.length - finished.length;
  return {
    title: `Delete ${pluralise(finished.length, "task")}?`,
    text: `${pluralise(finished.length, "finished task")}, ${finished.length === 1 ? "its" : "their"} records and artifacts will be deleted. Downstream tasks will show ${finished.length === 1 ? "it" : "them"} as missing.` +
      (active ? ` ${pluralise(active, "selected task")} ${active === 1 ? "is" : "are"} still queued or running and will not be deleted: cancel ${active === 1 ? "it" : "them"} first.` : ""),
    confirmLabel: "Delete tasks",
  };
}

async function cancelAll(statuses) {
  const outcomes = [];
  for (const s of statuses) {
    if (!ACTIVE.has(s.state)) {
      outcomes.push({ taskId: s.task_id, ok: false, message: `not cancelled: it already ${s.state === "cancelled" ? "was cancelled" : s.state}` });
      continue;
    }
    try {
      const cancelled = await jobAnswer("cancel", { task_id: s.task_id, run_id: s.run_id });
      outcomes.push({ taskId: s.task_id, ok: Boolean(cancelled),
        message: cancelled ? "cancellation requested" : "not cancelled: it had already ended or is not run by this server" });
    } catch (error) {
      outcomes.push({ taskId: s.task_id, ok: false, message: `not cancelled: ${error.message}` });
    }
  }
  return outcomes;
}

async function deleteAll(statuses) {
  const outcomes = [];
  const finished = statuses.filter((s) => !ACTIVE.has(s.state));
  for (const s of statuses) {
    if (ACTIVE.has(s.state)) {
      outcomes.push({ taskId: s.task_id, ok: false, message: `not deleted: it is ${s.state}; cancel it first` });
    }
  }
  if (finished.length) {
    const deleted = new Set(await jobAnswer("delete_tasks", { task_ids: finished.map((s) => s.task_id) }));
    for (const s of finished) {
      outcomes.push({ taskId: s.task_id, ok: deleted.has(s.task_id),
        message: deleted.has(s.task_id) ? "deleted" : "not deleted: it started running again or is already gone" });
    }
  }
  return outcomes;
}
