// Task detail: status and config, steps with progress bars, the live log, the error of a
// failed run, artifacts (download + preview), lineage, and cancel / delete / rerun.

import { agent, itemsOf, job, jobAnswer, taskFileUrl } from "../api.js";
import { append, errorBox, facts, h, replace, section, setText, spinner, stateBadge } from "../dom.js";
import { elapsed, formatDuration, instanceName, jsonText } from "../format.js";
import { timeElement } from "../times.js";
import { follow, eventData } from "../sse.js";
import { confirmAction, lineageHref, navigate, routeHref, setTitle, taskHref, toast } from "../ui.js";
import { fileTable } from "./files.js";
import { lineageGraph } from "./lineage.js";
import { LogView } from "./logview.js";
import { MetricsPanel } from "./metrics.js";
import { runsTable } from "./runs.js";
import { isActive } from "./tasks.js";

const POLL_MS = 2000;
const RECORD_FILES = new Set(["status.json", "metadata.json", "events.jsonl"]);
// stream_task event ids are (events.jsonl offset << 40) | log offset; starting with events
// offset 0 and the log offset we already show replays progress but not the log we have.
const LOG_SHIFT = 40n;
// the pauses between asking again for a task not listed yet: about 8 s in all
const NOT_FOUND_DELAYS_MS = [250, 500, 750, 1000, 1500, 2000, 2000];

const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

/** Did a status answer say that no task has this id (as opposed to a malformed id)? */
function isUnknownTask(reply) {
  return !reply.success && String(reply.answer).startsWith("KeyError:");
}

export function renderTask(main, [taskId]) {
  const view = new TaskDetail(main, taskId);
  view.start();
  return () => view.stop();
}

class TaskDetail {
  constructor(main, taskId) {
    this.main = main;
    this.taskId = taskId;
    this.alive = true;
    this.steps = new Map();
  }

  async start() {
    setTitle(instanceName(this.taskId));
    replace(this.main, spinner("Loading task…"));
    try {
      const reply = await this.firstStatus();
      if (!this.alive) return;
      if (!reply.success) return this.notFound(String(reply.answer));
      this.build(reply.answer);
    } catch (error) {
      if (this.alive) replace(this.main, errorBox(error.message, "Could not load the task."));
    }
    return undefined;
  }

  // A task opened right after its submit may not be listed yet (another server's submit, a
  // link printed before the record is written): an unknown id is asked again a few times,
  // for about 8 s in all, before the page says "Task not found".
  async firstStatus() {
    let reply = await job("status", { task_id: this.taskId });
    for (let attempt = 0; attempt < NOT_FOUND_DELAYS_MS.length && this.alive && isUnknownTask(reply); attempt++) {
      this.showWaiting(attempt + 1);
      await sleep(NOT_FOUND_DELAYS_MS[attempt]);
      if (!this.alive) break;
      reply = await job("status", { task_id: this.taskId });
    }
    return reply;
  }

  showWaiting(attempt) {
    replace(this.main,
      h("h1", {}, instanceName(this.taskId)),
      h("div", { class: "alert", role: "status", id: "task-waiting" },
        h("span", { class: "spin", "aria-hidden": "true" }), " ",
        h("strong", {}, "Waiting for the task…"), " ",
        h("span", { class: "alert-text" },
          `${this.taskId} is not listed yet (a task just submitted can take a moment). `,
          `Asking again (${attempt} of ${NOT_FOUND_DELAYS_MS.length})…`)));
  }

  stop() {
    this.alive = false;
    this.abort?.abort();
    clearInterval(this.poller);
    clearInterval(this.ticker);
    this.metrics?.destroy();
  }

  notFound(message) {
    replace(this.main,
      h("h1", {}, "Task not found"),
      errorBox(message, `No status for ${this.taskId}.`),
      h("p", {}, h("a", { href: lineageHref(this.taskId) }, "See its lineage"), " · ",
        h("a", { href: "#/tasks" }, "Back to the task list")));
  }

  build(status) {
    this.status = status;
    this.drawn = {};
    this.steps = new Map((status.steps || []).map((s) => [s.name, { ...s }]));
    this.badge = h("span", { id: "task-state" });
    this.actions = h("div", { class: "actions", role: "group", "aria-label": "Task actions" });
    this.errorSlot = h("div", { id: "task-error" });
    this.factsSlot = h("div");
    this.stepsSlot = h("div", { id: "task-steps" });
    this.artifactsSlot = h("div", { id: "task-artifacts" });
    this.resultSlot = h("div");
    this.lineageSlot = h("div", { id: "task-lineage" }, spinner("Loading lineage…"));
    this.runsSlot = h("div", { id: "task-runs" }, spinner("Loading runs…"));
    this.log = new LogView(this.taskId);
    this.metrics = new MetricsPanel(this.taskId);
    replace(this.main,
      h("nav", { class: "crumbs", "aria-label": "Breadcrumb" },
        h("a", { href: "#/tasks" }, "Tasks"), " / ", h("span", { "aria-current": "page" }, instanceName(this.taskId))),
      h("div", { class: "page-head" },
        h("div", { class: "title-block" },
          h("h1", {}, instanceName(this.taskId), " ", this.badge),
          h("code", { class: "task-id" }, this.taskId)),
        this.actions),
      this.errorSlot,
      h("div", { class: "grid-2" },
        section("Status", this.factsSlot),
        section("Steps", this.stepsSlot)),
      section("Metrics", this.metrics.el),
      section("Log", this.log.el),
      section("Artifacts", this.artifactsSlot),
      h("div", { class: "grid-2" },
        section("Configuration", configTable(status.config || {})),
        section("Result", this.resultSlot)),
      section("Runs", this.runsSlot),
      section("Lineage", this.lineageSlot));
    this.render();
    this.renderOutputs();
    this.loadLineage();
    this.loadRuns();
    this.metrics.refresh();
    this.ticker = setInterval(() => this.tickDuration(), 1000);
    this.log.loadTail().catch((error) => replace(this.log.el, errorBox(error.message, "Could not read the log.")))
      .then(() => {
        if (this.alive && isActive(this.status.state)) this.followLive();
      });
  }

  // Parts are redrawn only when what they show changed, so focus and selection survive polls.
  render() {
    const s = this.status;
    this.redraw("state", s.state, () => {
      replace(this.badge, stateBadge(s.state));
      this.renderActions();
    });
    this.redraw("error", `${s.state}\u0000${s.error}`, () => this.renderError());
    const { steps, result, config, ...shown } = s;
    this.redraw("facts", JSON.stringify(shown), () => this.renderFacts());
    this.redraw("steps", JSON.stringify([...this.steps.values()]), () => this.renderSteps());
  }

  redraw(part, key, draw) {
    this.drawn ||= {};
    if (this.drawn[part] === key) return;
    this.drawn[part] = key;
    draw();
  }

  duration() {
    const s = this.status;
    const ms = isActive(s.state) || s.finished_at ? elapsed(s.started_at, s.finished_at) : null;
    return formatDuration(ms);
  }

  tickDuration() {
    if (this.durationEl) setText(this.durationEl, this.duration());
  }

  renderFacts() {
    const s = this.status;
    const time = (iso) => timeElement(iso);
    this.durationEl = h("span", { id: "task-duration" }, this.duration());
    const waits = [];
    if (s.waiting_for?.length) waits.push(["Waiting for", h("div", { id: "task-waiting-for" }, sourceLinks(s.waiting_for.join(",")))]);
    if (s.queued_reason) waits.push(["Queued because", s.queued_reason]);
    const cache = cacheFact(s);
    if (cache) waits.push(["Cache", cache]);
    replace(this.factsSlot, facts([
      ...waits,
      ["Registered task", s.task_name],
      ["Type", s.task_type],
      ["Run id", h("code", {}, s.run_id)],
      ["Created", time(s.created_at)],
      ["Started", time(s.started_at)],
      ["Finished", time(s.finished_at)],
      ["Duration", this.durationEl],
      ["Process id", s.pid ?? "—"],
      ["Exit code", isActive(s.state) ? "—" : String(s.exit_code)],
      ["Log file", s.log_path ? h("code", { class: "wrap-anywhere" }, s.log_path) : "—"],
    ]));
  }

  renderError() {
    const s = this.status;
    if (!s.error || s.state === "succeeded") return replace(this.errorSlot);
    return replace(this.errorSlot, h("div", { class: "alert alert-error task-error", role: "alert" },
      h("strong", {}, s.state === "cancelled" ? "Cancelled" : `Failed (exit code ${s.exit_code})`),
      h("pre", { class: "error-text" }, s.error)));
  }

  renderSteps() {
    const steps = [...this.steps.values()];
    if (!steps.length) {
      return replace(this.stepsSlot, h("p", { class: "muted" }, isActive(this.status.state) ? "No step has started yet." : "This task reported no steps."));
    }
    const active = isActive(this.status.state);
    return replace(this.stepsSlot, h("ol", { class: "steps" }, steps.map((step) => {
      const pct = Math.max(0, Math.min(100, Number(step.percentage) || 0));
      const stopped = !active && !step.finished_at;
      const label = `${step.name}: ${pct.toFixed(0)}%${stopped ? ", stopped" : ""}`;
      const ms = step.started_at ? elapsed(step.started_at, step.finished_at) : null;
      const note = step.finished_at ? formatDuration(ms) : stopped ? `stopped (${this.status.state})` : step.started_at ? "running" : "";
      return h("li", { class: `step${stopped ? " step-stopped" : ""}`, "data-step": step.name },
        h("div", { class: "step-head" },
          h("span", { class: "step-name" }, step.name),
          h("span", { class: "muted small" }, note)),
        h("div", { class: "step-bar" },
          h("progress", { max: "100", value: String(pct), "aria-label": label }),
          h("span", { class: "step-pct num" }, `${pct.toFixed(0)}%`)));
    })));
  }

  renderActions() {
    const s = this.status;
    const active = isActive(s.state);
    const button = (label, attrs, handler) => {
      const b = h("button", { type: "button", class: "btn", ...attrs }, label);
      b.addEventListener("click", async () => {
        b.disabled = true;
        try {
          await handler();
        } catch (error) {
          toast(error.message, "error");
        } finally {
          b.disabled = false;
        }
      });
      return b;
    };
    replace(this.actions,
      h("a", { class: "btn", href: lineageHref(this.taskId) }, "Lineage"),
      h("a", { class: "btn", href: routeHref("submit", { task: s.task_name, from: this.taskId }) }, "Edit & submit"),
      active ? button("Cancel", { id: "task-cancel", class: "btn btn-danger" }, () => this.cancel()) : null,
      active ? null : button("Rerun", { id: "task-rerun" }, () => this.rerun()),
      active ? null : button("Delete", { id: "task-delete", class: "btn btn-danger" }, () => this.remove()));
  }

  async cancel() {
    const ok = await confirmAction({
      title: "Cancel this task?",
      text: `${this.taskId} will be stopped (SIGTERM, then SIGKILL after a grace period) and marked cancelled.`,
      confirmLabel: "Cancel task",
    });
    if (!ok) return;
    const cancelled = await jobAnswer("cancel", { task_id: this.taskId });
    toast(cancelled ? "Cancellation requested." : "Nothing was cancelled: no active worker managed by this server.", cancelled ? "info" : "error");
    await this.refresh();
  }

  async rerun() {
    const s = this.status;
    const fixedName = s.config?.task_name;
    const ok = await confirmAction({
      title: "Run this task again?",
      text: fixedName
        ? `${s.task_name} runs again with the same inputs and replaces ${this.taskId} (its earlier log is kept).`
        : `${s.task_name} runs again with the same inputs as a new task.`,
      confirmLabel: "Rerun",
      danger: false,
    });
    if (!ok) return;
    // a rerun runs: a cached result of these very inputs would answer with this task again
    const handle = await jobAnswer("submit", { ...(s.config || {}), task: s.task_name, cache: false });
    toast(`Submitted ${handle.task_id}.`);
    navigate(taskHref(handle.task_id));
  }

  async remove() {
    const ok = await confirmAction({
      title: "Delete this task?",
      text: `${this.taskId}, its records and its artifacts will be deleted. Downstream tasks will show it as missing.`,
      confirmLabel: "Delete task",
    });
    if (!ok) return;
    const deleted = await jobAnswer("delete_tasks", { task_ids: [this.taskId] });
    if (deleted.includes(this.taskId)) {
      toast(`Deleted ${this.taskId}.`);
      navigate("#/tasks");
    } else {
      toast("Not deleted: the task is active or not managed by this server.", "error");
    }
  }

  renderOutputs() {
    const s = this.status;
    const { artifacts = {}, ...rest } = s.result || {};
    const files = Object.entries(artifacts || {}).map(([name, ref]) => ({
      name, path: ref.path, size: ref.size, sha256: ref.sha256, url: taskFileUrl(this.taskId, ref.path),
    }));
    if (s.state === "failed" || s.state === "cancelled") {
      this.renderLeftFiles();
    } else {
      const empty = s.state === "succeeded" ? "This task recorded no artifacts." : "Artifacts are published when the task succeeds.";
      replace(this.artifactsSlot, fileTable(files, { caption: "Artifacts", emptyText: empty, id: "artifact-files", openSingle: true }));
    }
    replace(this.resultSlot, Object.keys(rest).length
      ? h("pre", { class: "json", tabindex: "0" }, jsonText(rest))
      : this.noResult());
  }

  noResult() {
    const s = this.status;
    if (s.state === "succeeded") return h("p", { class: "muted" }, "No result values besides artifacts.");
    if (s.state === "failed" || s.state === "cancelled") {
      const what = s.state === "failed" ? `The task failed (exit code ${s.exit_code}) before it returned a result.` : "The task was cancelled before it returned a result.";
      return h("div", { id: "task-result-error" },
        h("p", {}, what),
        s.error ? h("pre", { class: "error-text" }, s.error) : h("p", { class: "muted" }, "It recorded no error message."));
    }
    return h("p", { class: "muted" }, "No result yet.");
  }

  // A failed or cancelled task published no artifacts, but the files it wrote before it
  // stopped are often what explains why: list its folder (records left out).
  async renderLeftFiles() {
    replace(this.artifactsSlot, spinner("Listing the task's files…"));
    try {
      const listed = itemsOf(await agent(`/tasks/${encodeURIComponent(this.taskId)}/files`));
      if (!this.alive) return;
      const files = listed.filter((f) => !RECORD_FILES.has(f.path)).map((f) => ({
        name: f.path, path: f.path, size: f.size, url: taskFileUrl(this.taskId, f.path),
      }));
      const note = `The task ${this.status.state === "failed" ? "failed" : "was cancelled"}, so nothing was published as a result; these are the files it left in its folder.`;
      replace(this.artifactsSlot,
        h("p", { class: "muted", id: "left-files-note" }, note),
        fileTable(files, { caption: "Files the task left", emptyText: "It left no files.", id: "artifact-files" }));
    } catch (error) {
      if (this.alive) replace(this.artifactsSlot, errorBox(error.message, "Could not list the task's files."));
    }
  }

  async loadRuns() {
    try {
      const answer = await agent(`/tasks/${encodeURIComponent(this.taskId)}/runs`);
      if (this.alive) replace(this.runsSlot, runsTable(answer.runs || [], this.taskId));
    } catch (error) {
      if (!this.alive) return;
      replace(this.runsSlot, error.status === 404 && !error.code
        ? h("p", { class: "muted" }, "This server keeps no run history.")
        : errorBox(error.message, "Could not load the runs."));
    }
  }

  async loadLineage() {
    try {
      const graph = await jobAnswer("get_task_graph", { task_id: this.taskId });
      if (!this.alive) return;
      const alone = (graph.nodes || []).length <= 1;
      replace(this.lineageSlot,
        alone ? h("p", { class: "muted" }, "No upstream or downstream tasks.") : lineageGraph(graph, { label: `Lineage of ${this.taskId}` }));
    } catch (error) {
      if (this.alive) replace(this.lineageSlot, errorBox(error.message, "Could not load the lineage."));
    }
  }

  /** Apply a fresh status: a new run of the same id rebuilds the page. */
  apply(status) {
    if (!this.alive || !status || typeof status !== "object") return;
    if (status.run_id !== this.status.run_id) {
      this.stop();
      this.alive = true;
      this.build(status);
      return;
    }
    const wasActive = isActive(this.status.state);
    if (!wasActive && isActive(status.state)) return; // a finished run never becomes active again
    const stateChanged = status.state !== this.status.state;
    const metricsMoved = JSON.stringify(status.metrics ?? null) !== JSON.stringify(this.status.metrics ?? null);
    this.status = status;
    if (stateChanged || metricsMoved) this.metrics.poke();
    for (const step of status.steps || []) this.mergeStep(step);
    this.render();
    if (stateChanged) {
      this.loadLineage();
      this.loadRuns();
    }
    if (wasActive && !isActive(status.state)) {
      clearInterval(this.poller);
      this.renderOutputs();
    }
  }

  mergeStep(step) {
    const known = this.steps.get(step.name) || {};
    const percentage = Math.max(Number(known.percentage) || 0, Number(step.percentage) || 0);
    this.steps.set(step.name, { ...known, ...step, percentage });
  }

  // Polls, the stream's end and button handlers all refresh; an answer that arrives after a
  // newer one is dropped, so a stale "running" never overwrites "cancelled".
  async refresh() {
    const ticket = (this.asked = (this.asked || 0) + 1);
    const reply = await job("status", { task_id: this.taskId });
    if (ticket < (this.answered || 0)) return;
    this.answered = ticket;
    if (reply.success) this.apply(reply.answer);
  }

  followLive() {
    this.abort = new AbortController();
    this.poller = setInterval(() => this.refresh().catch(() => {}), POLL_MS);
    const startId = ((0n << LOG_SHIFT) | BigInt(this.log.end)).toString();
    // metric events are opt-in (AxonX's client refuses kinds it does not know); each one
    // only prompts the metrics panel to read the series again, at most once a second
    follow("/jobs/stream_task/events?metrics=true", {
      method: "POST",
      body: JSON.stringify({ arguments: { task_id: this.taskId } }),
      lastEventId: startId,
      signal: this.abort.signal,
      isFinal: (event) => event.event === "result",
      onEvent: (event) => this.onStreamEvent(event),
      shouldReconnect: async () => {
        await this.refresh().catch(() => {});
        return this.alive && isActive(this.status.state);
      },
    }).catch((error) => toast(`Live updates stopped: ${error.message}`, "error"))
      .finally(() => {
        if (this.alive) this.refresh().catch(() => {});
      });
  }

  onStreamEvent(event) {
    const data = eventData(event);
    if (event.event === "progress") {
      this.mergeStep(data);
      this.render();
    } else if (event.event === "log") {
      this.log.appendChunk(data).catch(() => {});
    } else if (event.event === "metric") {
      this.metrics.poke();
    } else if (event.event === "result" && data && typeof data.answer === "object") {
      this.apply(data.answer);
    }
  }
}

function configTable(config) {
  const entries = Object.entries(config);
  if (!entries.length) return h("p", { class: "muted" }, "No inputs.");
  return h("table", { class: "table kv" },
    h("tbody", {}, entries.map(([key, value]) => h("tr", {},
      h("th", { scope: "row" }, key),
      h("td", {}, key === "source_tasks" ? sourceLinks(value) : valueText(value))))));
}

function sourceLinks(value) {
  const ids = String(value || "").split(",").map((s) => s.trim()).filter(Boolean);
  if (!ids.length) return h("span", { class: "muted" }, "none");
  return h("ul", { class: "plain" }, ids.map((id) => h("li", {}, h("a", { href: taskHref(id) }, id))));
}

const LONG_VALUE = 400;

function valueText(value) {
  if (value === null || value === undefined) return h("span", { class: "muted" }, "null");
  if (value === "") return h("span", { class: "muted" }, "(empty)");
  const text = typeof value === "string" ? value : JSON.stringify(value);
  const el = h(typeof value === "string" ? "span" : "code", { class: "wrap-anywhere" });
  if (text.length <= LONG_VALUE) return append(el, text);
  const more = h("button", { type: "button", class: "btn btn-tiny" }, `Show all ${text.length.toLocaleString()} characters`);
  more.addEventListener("click", () => {
    el.textContent = text;
  });
  return append(el, [`${text.slice(0, LONG_VALUE)}… `, more]);
}

/** What the cache holds of a run: its key once known (a success serves later submits of
 * the same key, marked "cached result"), or that it gets one when its upstreams succeed. */
function cacheFact(s) {
  if (s.cache_key) {
    const serves = s.state === "succeeded";
    return h("span", { id: "task-cache" },
      serves ? h("span", { class: "badge", title: "Submits with the same cache key are answered with this task" }, "cached result") : null,
      serves ? " " : null,
      "key ", h("code", { title: s.cache_key }, `${s.cache_key.slice(0, 12)}…`));
  }
  const later = s.cache && s.waiting_for?.length;
  return later ? h("span", { id: "task-cache" }, "its key is taken once its upstreams succeeded") : null;
}
