// Submit: pick a task definition; its input JSON Schema becomes a form. Errors found here,
// the server's 422 and its `success: false` answer all show next to the fields they concern.

import { ApiError, issueField, job } from "../api.js";
import { errorBox, h, replace, spinner } from "../dom.js";
import { navigate, replaceQuery, setTitle, taskHref, toast } from "../ui.js";
import { pluginProblems } from "../pluginproblems.js";
import { parseServerErrors, SchemaForm } from "../schemaform.js";
import { attachTaskPicker } from "../taskpicker.js";

const COMMON = {
  title: "Instance and lineage",
  names: ["task_name", "source_tasks"],
  note: "Leave the name empty for a generated one. Upstream tasks are full task ids, comma-separated: type them, or search for tasks below the field and choose.",
};

export function renderSubmit(main, _params, query) {
  setTitle("Submit a task");
  const view = new SubmitView(main, query.get("task") || "", query.get("from") || "");
  view.start();
  return () => {
    view.alive = false;
  };
}

class SubmitView {
  constructor(main, task, fromTaskId) {
    this.main = main;
    this.task = task;
    this.fromTaskId = fromTaskId;
    this.alive = true;
  }

  async start() {
    this.body = h("div", {}, spinner("Loading task definitions…"));
    this.main.append(h("div", { class: "page-head" }, h("h1", {}, "Submit a task")), this.body);
    try {
      const [listing, initial] = await Promise.all([
        job("list_installed_task_definitions"),
        this.fromTaskId ? this.configOf(this.fromTaskId) : {},
      ]);
      if (!this.alive) return;
      if (!listing.success) throw new ApiError(String(listing.answer), { status: 200, detail: listing.answer });
      this.definitions = listing.answer;
      this.problems = pluginProblems(listing.metadata);
      this.initial = initial;
      this.build();
    } catch (error) {
      if (this.alive) replace(this.body, errorBox(error.message, "Could not load the task definitions."));
    }
  }

  async configOf(taskId) {
    const reply = await job("status", { task_id: taskId });
    return reply.success ? reply.answer.config || {} : {};
  }

  build() {
    if (!this.definitions.length) {
      replace(this.body, this.problems, h("p", {}, "No task definitions are installed."));
      return;
    }
    const names = this.definitions.map((d) => d.name);
    const chosen = names.includes(this.task) ? this.task : names[0];
    const missing = this.task && !names.includes(this.task);
    if (missing) {
      this.initial = {};
      this.fromTaskId = "";
    }
    this.picker = h("select", { id: "definition", name: "definition" },
      this.definitions.map((d) => h("option", { value: d.name, selected: d.name === chosen }, `${d.name} (${d.task_type})`)));
    this.picker.addEventListener("change", () => {
      this.initial = {};
      this.fromTaskId = "";
      replaceQuery({ task: this.picker.value });
      this.showDefinition();
    });
    this.about = h("div", { class: "definition-about" });
    this.summary = h("div", { id: "form-summary", tabindex: "-1" });
    this.inputs = h("div");
    this.button = h("button", { type: "submit", class: "btn btn-primary", id: "submit-task" }, "Submit");
    this.cache = cacheChoice();
    this.form = h("form", { class: "submit-form", novalidate: true, "aria-labelledby": "definition-label" },
      h("div", { class: "field" },
        h("label", { for: "definition", id: "definition-label" }, "Task definition"), this.picker),
      this.about, this.summary, this.inputs, this.cache.el,
      h("div", { class: "form-actions" }, this.button));
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.submit();
    });
    replace(this.body, this.problems, missing
      ? h("div", { class: "alert", role: "status" }, `No task definition named “${this.task}” is installed here; choose another one.`)
      : null, this.form);
    this.showDefinition();
  }

  get definition() {
    return this.definitions.find((d) => d.name === this.picker.value);
  }

  showDefinition() {
    const d = this.definition;
    replace(this.about,
      h("p", { class: "definition-meta" },
        h("span", { class: "badge" }, d.task_type), " ",
        h("span", { class: "badge badge-quiet" }, d.source === "plugin" ? `plugin ${d.plugin || ""}`.trim() : "built-in")),
      h("p", { class: "definition-description" }, d.description),
      this.fromTaskId ? h("p", { class: "muted small" }, "Prefilled from ", h("a", { href: taskHref(this.fromTaskId) }, this.fromTaskId), ".") : null);
    this.schemaForm = new SchemaForm(d.input_schema, { initial: this.initial, groups: [COMMON], idPrefix: "in" });
    const upstream = this.schemaForm.controls.get("source_tasks");
    if (upstream) attachTaskPicker(upstream.control);
    replace(this.inputs, this.schemaForm.el);
    replace(this.summary);
  }

  showErrors(errors, general = "") {
    this.schemaForm.showErrors(errors);
    if (!errors.size && !general) {
      replace(this.summary);
      return;
    }
    const links = [...errors].map(([name, message]) => h("li", {},
      h("a", { href: `#in-${name}`, onclick: (e) => {
        e.preventDefault();
        this.schemaForm.focus(name);
      } }, `${this.schemaForm.controls.get(name)?.field.title || name}: ${message}`)));
    replace(this.summary, h("div", { class: "alert alert-error", role: "alert", id: "form-errors" },
      h("strong", {}, errors.size ? "Please correct the highlighted fields." : "The task was not submitted."),
      general ? h("p", { class: "alert-text server-error" }, general) : null,
      links.length ? h("ul", {}, links) : null));
    const first = errors.keys().next().value;
    if (first) this.schemaForm.focus(first);
    else this.summary.focus();
  }

  async submit() {
    const { values, errors } = this.schemaForm.collect();
    if (errors.size) return this.showErrors(errors);
    this.showErrors(new Map());
    this.button.disabled = true;
    this.button.textContent = "Submitting…";
    try {
      const reply = await job("submit", { ...values, ...this.cache.argument(), task: this.definition.name });
      if (!this.alive) return undefined;
      if (reply.success) {
        toast(reply.answer.cached ? cachedNote(reply.answer) : `Submitted ${reply.answer.task_id}.`);
        navigate(taskHref(reply.answer.task_id));
        return undefined;
      }
      const { fields, general } = parseServerErrors(reply.answer, this.schemaForm.names);
      this.showErrors(fields, general);
    } catch (error) {
      if (error instanceof ApiError && error.status === 422 && Array.isArray(error.detail)) {
        const fields = new Map();
        for (const issue of error.detail) fields.set(issueField(issue).split(".")[0], issue.msg);
        const known = new Map([...fields].filter(([name]) => this.schemaForm.names.has(name)));
        this.showErrors(known, known.size === fields.size ? "" : error.message);
      } else {
        this.showErrors(new Map(), error.message);
      }
    } finally {
      this.button.disabled = false;
      this.button.textContent = "Submit";
    }
    return undefined;
  }
}

/** The submit's `cache` choice: the task's own setting, a cached result, or a run anyway. */
function cacheChoice() {
  const select = h("select", { id: "submit-cache", name: "cache" },
    h("option", { value: "" }, "The task's setting"),
    h("option", { value: "true" }, "Use a cached result when an earlier run matches"),
    h("option", { value: "false" }, "Run it, even if a cached result matches"));
  return {
    el: h("div", { class: "field" }, h("label", { for: "submit-cache" }, "Cache"), select,
      h("p", { class: "muted small" }, "A match is the same task, inputs, upstream artifacts and plugin version, already succeeded: nothing runs and its task opens.")),
    argument: () => (select.value === "" ? {} : { cache: select.value === "true" }),
  };
}

/** The note after a submit a cached result answered. */
function cachedNote(handle) {
  return `Cached: ${handle.task_id} already succeeded with these inputs; nothing ran.`;
}
