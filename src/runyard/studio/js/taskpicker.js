// The submit form's upstream-task field as a picker: its text input stays what is sent (full
// task ids, comma-separated, typed or pasted as before) and gains a search over the server's
// tasks beside it (GET /api/v1/tasks?text=...): choosing a match adds its full id, once.

import { agent, itemsOf } from "./api.js";
import { h, replace, stateBadge } from "./dom.js";
import { instanceName } from "./format.js";

const SEARCH_DEBOUNCE_MS = 200;
const MATCHES = 10;

/** The ids a comma-separated field holds, in order, without blanks. */
export function idsOf(text) {
  return String(text || "").split(",").map((part) => part.trim()).filter(Boolean);
}

/** `text` with `taskId` added at its end, unless it already holds it. */
export function withId(text, taskId) {
  const ids = idsOf(text);
  return (ids.includes(taskId) ? ids : [...ids, taskId]).join(", ");
}

/**
 * Put a search over existing tasks after `control` (a text input of comma-separated task
 * ids). Answers the picker's element. A choice fires `input` on the control so the form sees
 * it as typed.
 */
export function attachTaskPicker(control) {
  const picker = new TaskPicker(control);
  control.after(picker.el);
  return picker.el;
}

class TaskPicker {
  constructor(control) {
    this.control = control;
    this.asked = 0;
    const listId = `${control.id}-matches`;
    this.search = h("input", {
      id: `${control.id}-search`, type: "search", autocomplete: "off", spellcheck: "false",
      placeholder: "Search tasks by name, id or input…", "aria-controls": listId,
      "aria-label": "Search tasks to add as upstream tasks",
    });
    this.status = h("p", { class: "muted small picker-status", role: "status" });
    this.list = h("ul", { class: "plain picker-matches", id: listId, "aria-label": "Matching tasks" });
    this.el = h("div", { class: "task-picker" }, this.search, this.status, this.list);
    this.search.addEventListener("input", () => this.soon());
    this.search.addEventListener("focus", () => {
      if (!this.list.children.length) this.soon();
    });
    this.search.addEventListener("keydown", (event) => this.onSearchKey(event));
    this.list.addEventListener("keydown", (event) => this.onListKey(event));
  }

  soon() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.find(this.search.value.trim()), SEARCH_DEBOUNCE_MS);
  }

  // Only the newest search's answer is shown; an earlier one still in flight is aborted.
  async find(text) {
    this.abort?.abort();
    const abort = new AbortController();
    this.abort = abort;
    const ticket = ++this.asked;
    const params = new URLSearchParams({ limit: String(MATCHES), sort: "created_at", order: "desc" });
    if (text) params.set("text", text);
    replace(this.status, "Searching…");
    try {
      const answer = await agent(`/tasks?${params}`, { signal: abort.signal });
      if (ticket !== this.asked) return;
      this.show(itemsOf(answer), text);
    } catch (error) {
      if (ticket !== this.asked || abort.signal.aborted) return;
      replace(this.list);
      replace(this.status, `Could not search the tasks: ${error.message}`);
    }
  }

  show(tasks, text) {
    const chosen = new Set(idsOf(this.control.value));
    replace(this.list, tasks.map((task) => h("li", {},
      h("button", {
        type: "button", class: "picker-option", "data-task-id": task.task_id,
        "aria-pressed": String(chosen.has(task.task_id)), onclick: () => this.choose(task.task_id),
      },
      h("span", { class: "picker-name" }, instanceName(task.task_id)), " ",
      stateBadge(task.state), " ",
      h("code", { class: "muted small wrap-anywhere" }, task.task_id)))));
    const what = text ? `matching “${text}”` : "most recent";
    replace(this.status, tasks.length
      ? `${tasks.length} ${what}${tasks.length === MATCHES ? ` (the first ${MATCHES})` : ""}: choose one to add it.`
      : `No task ${text ? what : "yet"}.`);
  }

  choose(taskId) {
    this.control.value = withId(this.control.value, taskId);
    this.control.dispatchEvent(new Event("input", { bubbles: true }));
    for (const option of this.list.querySelectorAll(".picker-option")) {
      option.setAttribute("aria-pressed", String(option.dataset.taskId === taskId || option.getAttribute("aria-pressed") === "true"));
    }
    replace(this.status, `Added ${taskId}.`);
  }

  onSearchKey(event) {
    if (event.key === "ArrowDown") {
      event.preventDefault();
      this.list.querySelector(".picker-option")?.focus();
    } else if (event.key === "Escape") {
      replace(this.list);
      replace(this.status);
    }
  }

  onListKey(event) {
    const options = [...this.list.querySelectorAll(".picker-option")];
    const at = options.indexOf(document.activeElement);
    if (at < 0) return;
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      const next = at + (event.key === "ArrowDown" ? 1 : -1);
      if (next < 0) this.search.focus();
      else options[Math.min(next, options.length - 1)].focus();
    }
  }
}
