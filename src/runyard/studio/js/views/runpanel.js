// One agent run: its record, live events (state changes) and output lines from the run's
// SSE stream, then its output files with previews, and cancel while it is active.

import { agent, itemsOf, runFileUrl } from "../api.js";
import { errorBox, facts, h, replace, spinner, stateBadge } from "../dom.js";
import { elapsed, formatDuration } from "../format.js";
import { timeElement } from "../times.js";
import { eventData, follow } from "../sse.js";
import { confirmAction, toast } from "../ui.js";
import { fileTable } from "./files.js";

const MAX_EVENTS = 500;
const MAX_OUTPUT = 1024 * 1024;
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
const FINAL_EVENTS = new Set(["result", "end", "done", "final", "closed"]);

export const isActiveRun = (run) => Boolean(run) && !TERMINAL.has(run.state);

export function runDuration(run) {
  const ms = isActiveRun(run) || run.finishedAt ? elapsed(run.startedAt, run.finishedAt) : null;
  return formatDuration(ms);
}

/**
 * The selected run of a session, drawn into `container`. `host` tells it what the session
 * knows: {afterRun(runId) -> run, afterCancel(), hasAnswer(runId), onAnswer(runId, text),
 * fork(runId), restore(runId), canRestore()}.
 */
export class RunPanel {
  constructor(container, host) {
    this.container = container;
    this.host = host;
    this.runId = null;
    this.active = false;
  }

  /** Show run `runId` (its record when known) and follow its events. */
  show(runId, run) {
    this.stop();
    this.runId = runId;
    this.eventsList = h("ol", { class: "events", id: "run-events", "aria-label": "Run events" });
    this.runOutput = h("pre", { class: "log run-output", id: "run-output", tabindex: "0", "aria-label": "Run output" });
    this.outputBytes = 0;
    this.runFacts = h("div");
    this.runFiles = h("div", { id: "run-files" }, spinner("Loading output files…"));
    this.runActions = h("div", { class: "actions" });
    this.checkpointEl = h("div", { id: "run-checkpoint", class: "checkpoint" });
    replace(this.container, h("div", { class: "run-panel" },
      h("div", { class: "page-head" }, h("h3", {}, "Run ", h("code", {}, runId)), this.runActions),
      this.runFacts,
      this.checkpointEl,
      h("div", { class: "grid-2" },
        h("div", {}, h("h4", {}, "Events"), this.eventsList),
        h("div", {}, h("h4", {}, "Output"), this.runOutput)),
      h("h4", {}, "Output files"), this.runFiles));
    if (run) this.update(run);
    this.followEvents(runId);
    if (!isActiveRun(run)) this.loadFiles(runId);
  }

  stop() {
    this.abort?.abort();
  }

  /** A newer record of the shown run. */
  update(run) {
    if (run.id !== this.runId) return;
    this.active = isActiveRun(run);
    replace(this.runFacts, facts([
      ["State", stateBadge(run.state)],
      ["Prompt", h("span", { class: "wrap-anywhere" }, run.userPrompt)],
      ["Started", timeElement(run.startedAt)],
      ["Duration", runDuration(run)],
      ["Exit code", run.exitCode ?? "—"],
      ["Isolation", run.isolation || "—"],
    ]));
    if (run.error) this.runFacts.append(h("div", { class: "alert alert-error", role: "alert" }, h("strong", {}, "Error "), h("pre", { class: "error-text" }, run.error)));
    this.showCheckpoint(run);
    if (this.runActions.dataset.active === String(this.active)) return;
    this.runActions.dataset.active = String(this.active);
    replace(this.runActions, this.active
      ? h("button", { type: "button", class: "btn btn-danger", id: "run-cancel", onclick: () => this.cancel(run.id) }, "Cancel run")
      : null);
  }

  // The state snapshot taken when the run ended, with Fork and Restore (each confirmed).
  showCheckpoint(run) {
    const checkpoint = run.checkpoint;
    if (!checkpoint) {
      replace(this.checkpointEl, isActiveRun(run) ? null : h("p", { class: "muted small" }, "No checkpoint was taken for this run."));
      return;
    }
    if (checkpoint.state !== "present") {
      replace(this.checkpointEl, h("p", { class: "muted small", id: "checkpoint-missing" },
        `No checkpoint: ${checkpoint.reason || checkpoint.state}`));
      return;
    }
    const skipped = checkpoint.skipped?.length
      ? ` · ${checkpoint.skipped.length} not taken (${checkpoint.skipped.map((s) => `${s.path}: ${s.kind}`).join(", ")})` : "";
    const fork = h("button", { type: "button", class: "btn", id: "checkpoint-fork" }, "Fork from here");
    const restore = h("button", { type: "button", class: "btn", id: "checkpoint-restore", disabled: !this.host.canRestore() },
      "Restore state");
    fork.addEventListener("click", () => this.host.fork(run.id));
    restore.addEventListener("click", () => this.host.restore(run.id));
    replace(this.checkpointEl, h("div", { class: "checkpoint-line" },
      h("h4", {}, "Checkpoint"),
      h("p", { class: "small" }, `State after this run: ${checkpoint.files} files, ${checkpoint.bytes} bytes`, skipped),
      h("div", { class: "actions" }, fork, restore)));
  }

  async cancel(runId) {
    const ok = await confirmAction({ title: "Cancel this run?", text: `Run ${runId} will be stopped.`, confirmLabel: "Cancel run" });
    if (!ok) return;
    try {
      await agent(`/runs/${encodeURIComponent(runId)}/cancel`, { method: "POST" });
      toast("Cancellation requested.");
      await this.host.afterCancel();
    } catch (error) {
      toast(error.message, "error");
    }
  }

  followEvents(runId) {
    const abort = new AbortController();
    this.abort = abort;
    follow(`/api/v1/runs/${encodeURIComponent(runId)}/events`, {
      signal: abort.signal,
      onEvent: (event) => this.showEvent(event),
      isFinal: (event) => FINAL_EVENTS.has(event.event) || TERMINAL.has(eventData(event)?.state)
        || TERMINAL.has(eventData(event)?.data?.state),
      shouldReconnect: async () => {
        const run = await agent(`/runs/${encodeURIComponent(runId)}`).catch(() => null);
        return isActiveRun(run);
      },
    }).catch((error) => {
      if (!abort.signal.aborted) this.eventsList.append(h("li", { class: "event event-error" }, `Live events stopped: ${error.message}`));
    }).finally(() => {
      if (!abort.signal.aborted) this.finished(runId);
    });
  }

  async finished(runId) {
    const run = await this.host.afterRun(runId);
    if (runId !== this.runId) return;
    if (run) this.update(run);
    await this.loadFiles(runId);
  }

  showEvent(event) {
    const data = eventData(event);
    if (event.event === "log") return this.showOutput(data);
    if (event.event === "end" && data?.run) this.update(data.run);
    const payload = data && typeof data === "object" && data.data && typeof data.data === "object" ? data.data : data;
    const kind = event.event === "message" ? data?.kind || "message" : event.event;
    const at = payload?.at || payload?.createdAt || payload?.run?.finishedAt;
    const text = event.event === "end" ? `run ${payload?.run?.state || "ended"}` : eventText(payload);
    this.eventsList.append(h("li", { class: `event event-${String(kind).replace(/[^a-z0-9-]/gi, "")}` },
      h("span", { class: "event-kind" }, kind),
      at ? timeElement(at, { className: "muted small" }) : null,
      h("span", { class: "event-text" }, text)));
    while (this.eventsList.children.length > MAX_EVENTS) this.eventsList.firstChild.remove();
    this.eventsList.scrollTop = this.eventsList.scrollHeight;
    return undefined;
  }

  // Output lines as they are written; only the last MAX_OUTPUT characters stay in the page.
  showOutput(data) {
    const text = typeof data === "string" ? data : data?.content || "";
    if (!text) return;
    const atEnd = this.runOutput.scrollHeight - this.runOutput.scrollTop - this.runOutput.clientHeight < 32;
    this.runOutput.append(document.createTextNode(text));
    this.outputBytes += text.length;
    while (this.outputBytes > MAX_OUTPUT && this.runOutput.childNodes.length > 1) {
      this.outputBytes -= this.runOutput.firstChild.textContent.length;
      this.runOutput.firstChild.remove();
    }
    if (atEnd) this.runOutput.scrollTop = this.runOutput.scrollHeight;
  }

  async loadFiles(runId) {
    try {
      const answer = await agent(`/runs/${encodeURIComponent(runId)}/files`);
      if (runId !== this.runId) return;
      const files = itemsOf(answer).map((f) => {
        const path = f.path || f.relativePath || f.name;
        return { name: path, path, size: f.size, sha256: f.sha256, mediaType: f.mediaType, url: runFileUrl(runId, path) };
      });
      replace(this.runFiles, fileTable(files, { caption: "Output files", emptyText: "This run wrote no output files.", id: "run-output-files" }));
      this.showFinalAnswer(runId, files);
    } catch (error) {
      if (runId === this.runId) replace(this.runFiles, errorBox(error.message, "Could not list the output files."));
    }
  }

  // The backend folds a run's final-answer.md into the history; until it has, show it here.
  async showFinalAnswer(runId, files) {
    const answered = this.host.hasAnswer(runId);
    const file = files.find((f) => /(^|\/)final-answer\.md$/.test(f.path));
    if (answered || !file || file.size > 256 * 1024) return;
    try {
      const response = await agent(`/runs/${encodeURIComponent(runId)}/files/${file.path.split("/").map(encodeURIComponent).join("/")}`, { headers: { Accept: "*/*" } });
      this.host.onAnswer(runId, typeof response === "string" ? response : JSON.stringify(response));
    } catch {
      // the file list already offers it for download
    }
  }
}

function eventText(payload) {
  if (payload === null || payload === undefined) return "";
  if (typeof payload !== "object") return String(payload);
  for (const key of ["state", "message", "text", "content", "line", "error"]) {
    if (typeof payload[key] === "string" && payload[key]) return payload[key];
  }
  return JSON.stringify(payload);
}
