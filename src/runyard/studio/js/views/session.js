// One agent session: its conversation, uploads (drag and drop), starting a run with a prompt,
// its runs (the selected one in a RunPanel), and close / reopen.

import { agent, artifactUrl, itemsOf, uploadArtifact } from "../api.js";
import { errorBox, h, onActivate, replace, section, setText, spinner, stateBadge } from "../dom.js";
import { formatBytes } from "../format.js";
import { renderMarkdown } from "../markdown.js";
import { timeElement } from "../times.js";
import { confirmAction, setTitle, toast } from "../ui.js";
import { fileTable } from "./files.js";
import { isActiveRun, RunPanel, runDuration } from "./runpanel.js";
import { agentUnavailable, unavailableNotice } from "./sessions.js";

const POLL_MS = 2000;
const PAGE = 1000; // uploads and runs read per session (the API's largest page)

export function renderSession(main, [sessionId]) {
  const view = new SessionView(main, sessionId);
  view.start();
  return () => view.stop();
}

class SessionView {
  constructor(main, sessionId) {
    this.main = main;
    this.sessionId = sessionId;
    this.alive = true;
    this.runs = [];
    this.artifacts = [];
    this.selectedRunId = null;
  }

  async start() {
    setTitle("Session");
    replace(this.main, spinner("Loading session…"));
    try {
      this.session = await agent(`/sessions/${encodeURIComponent(this.sessionId)}`);
      if (!this.alive) return;
      this.build();
      await Promise.all([this.loadArtifacts(), this.loadRuns()]);
      const latest = this.session.latestRunId || this.runs[0]?.id;
      if (latest) this.selectRun(latest);
      this.poller = setInterval(() => this.poll(), POLL_MS);
    } catch (error) {
      if (!this.alive) return;
      replace(this.main, agentUnavailable(error) ? unavailableNotice()
        : errorBox(error.message, `Could not load session ${this.sessionId}.`),
      h("p", {}, h("a", { href: "#/sessions" }, "Back to sessions")));
    }
  }

  stop() {
    this.alive = false;
    clearInterval(this.poller);
    this.panel?.stop();
  }

  get writable() {
    return this.session?.status === "OPEN";
  }

  build() {
    this.titleEl = h("h1", {});
    this.originEl = h("p", { class: "muted small", id: "forked-from", hidden: true });
    this.statusEl = h("span", { id: "session-status" });
    this.toggle = h("button", { type: "button", class: "btn", id: "session-toggle" });
    this.toggle.addEventListener("click", () => this.toggleOpen());
    this.closedNote = h("p", { class: "alert", id: "closed-note", hidden: true },
      "This session is closed: its history, files and runs are kept, but new uploads and runs are refused until it is reopened.");
    this.chat = h("ol", { class: "chat", id: "chat", "aria-label": "Conversation" });
    this.composer = this.buildComposer();
    this.uploads = this.buildUploads();
    this.runsTable = h("div", { id: "runs" });
    this.runPanel = h("div", { id: "run-panel" });
    this.panel = new RunPanel(this.runPanel, {
      afterRun: async (runId) => {
        await Promise.all([this.loadRuns().catch(() => {}), this.reloadSession().catch(() => {})]);
        return this.alive && runId === this.selectedRunId ? this.runs.find((r) => r.id === runId) : undefined;
      },
      afterCancel: () => this.loadRuns(),
      hasAnswer: (runId) => (this.session.history || []).some((m) => m.role === "assistant" && m.runId === runId),
      onAnswer: (runId, content) => {
        this.pendingAnswer = { runId, content };
        this.renderChat();
      },
      fork: (runId) => this.fork(runId),
      restore: (runId) => this.restore(runId),
      canRestore: () => this.writable && !this.runs.some(isActiveRun),
    });
    replace(this.main,
      h("nav", { class: "crumbs", "aria-label": "Breadcrumb" },
        h("a", { href: "#/sessions" }, "Sessions"), " / ", h("span", { "aria-current": "page" }, this.session.title || "Untitled session")),
      h("div", { class: "page-head" },
        h("div", { class: "title-block" }, h("div", { class: "title-line" }, this.titleEl, this.statusEl),
          h("code", { class: "task-id" }, this.sessionId), this.originEl),
        h("div", { class: "actions" }, this.toggle)),
      this.closedNote,
      h("div", { class: "session-grid" },
        section("Conversation", this.chat, this.composer.el),
        section("Files", this.uploads.el)),
      section("Runs", this.runsTable, this.runPanel));
    this.renderSession();
  }

  renderSession() {
    const s = this.session;
    setTitle(s.title || "Session");
    setText(this.titleEl, s.title || "Untitled session");
    replace(this.statusEl, stateBadge(String(s.status).toLowerCase()));
    this.toggle.textContent = this.writable ? "Close session" : "Reopen session";
    this.closedNote.hidden = this.writable;
    const origin = s.forkedFrom;
    this.originEl.hidden = !origin;
    if (origin) {
      replace(this.originEl, "Forked from ",
        h("a", { href: `#/sessions/${encodeURIComponent(origin.sessionId)}` }, origin.sessionId),
        " at run ", h("code", {}, origin.runId));
    }
    this.composer.setEnabled(this.writable);
    this.uploads.setEnabled(this.writable);
    this.renderChat();
  }

  renderChat() {
    const history = this.session.history || [];
    const answered = new Set(history.filter((m) => m.role === "assistant").map((m) => m.runId));
    const items = history.map((m) => message(m.role, m.content, m.createdAt, m.runId));
    for (const run of this.runs) {
      if (isActiveRun(run) && !answered.has(run.id)) {
        items.push(h("li", { class: "msg msg-assistant msg-pending", "data-run-id": run.id },
          h("div", { class: "msg-meta" }, "agent · ", stateBadge(run.state)),
          h("p", { class: "msg-body muted" }, run.state === "queued" ? "Waiting for a slot…" : "Working…")));
      }
    }
    if (this.pendingAnswer && !answered.has(this.pendingAnswer.runId)) {
      items.push(message("assistant", this.pendingAnswer.content, null, this.pendingAnswer.runId, "from the run's final-answer.md"));
    }
    if (!items.length) items.push(h("li", { class: "muted chat-empty" }, "No messages yet. Write a prompt below to start a run."));
    const atBottom = this.chat.scrollHeight - this.chat.scrollTop - this.chat.clientHeight < 40;
    replace(this.chat, items);
    if (atBottom) this.chat.scrollTop = this.chat.scrollHeight;
  }

  buildComposer() {
    const prompt = h("textarea", { id: "prompt", rows: "3", placeholder: "Ask the agent…", required: true });
    const system = h("textarea", { id: "system-prompt", rows: "2" });
    const error = h("p", { class: "field-error", id: "prompt-error", hidden: true });
    const button = h("button", { type: "submit", class: "btn btn-primary", id: "start-run" }, "Start run");
    this.attachList = h("div", { class: "attach-list", id: "attach-list" });
    const form = h("form", { class: "composer", novalidate: true, "aria-label": "Start a run" },
      h("div", { class: "field" }, h("label", { for: "prompt" }, "Prompt"), prompt, error),
      h("details", {}, h("summary", {}, "System prompt and attached files"),
        h("div", { class: "field" }, h("label", { for: "system-prompt" }, "System prompt (optional)"), system),
        h("fieldset", { class: "fieldset" }, h("legend", {}, "Files given to the run"), this.attachList)),
      h("div", { class: "form-actions" }, button));
    prompt.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const text = prompt.value.trim();
      error.hidden = !!text;
      error.textContent = text ? "" : "Write a prompt first.";
      if (!text) return prompt.focus();
      button.disabled = true;
      try {
        const body = { sessionId: this.sessionId, userPrompt: text, artifactIds: this.attachedIds() };
        if (system.value.trim()) body.systemPrompt = system.value.trim();
        const run = await agent("/runs", { method: "POST", json: body });
        prompt.value = "";
        toast("Run started.");
        await Promise.all([this.reloadSession(), this.loadRuns()]);
        this.selectRun(run.id);
      } catch (err) {
        error.hidden = false;
        error.textContent = err.message;
      } finally {
        button.disabled = !this.writable;
      }
      return undefined;
    });
    return {
      el: form,
      setEnabled: (on) => {
        prompt.disabled = !on;
        system.disabled = !on;
        button.disabled = !on;
      },
    };
  }

  attachedIds() {
    return [...this.attachList.querySelectorAll("input[type=checkbox]:checked")].map((c) => c.value);
  }

  buildUploads() {
    const input = h("input", { type: "file", id: "upload-input", multiple: true, class: "visually-hidden", tabindex: "-1" });
    const choose = h("button", { type: "button", class: "btn", id: "upload-choose" }, "Choose files…");
    const zone = h("div", { class: "dropzone", id: "dropzone" },
      h("p", {}, "Drop files here to upload them to this session"), h("p", { class: "muted small" }, "or"), choose, input);
    const progress = h("ul", { class: "upload-progress plain", "aria-live": "polite" });
    this.artifactList = h("div", { id: "session-files" });
    choose.addEventListener("click", () => input.click());
    input.addEventListener("change", () => {
      this.upload([...input.files]);
      input.value = "";
    });
    const over = (on) => (event) => {
      event.preventDefault();
      if (this.writable) zone.classList.toggle("is-over", on);
    };
    zone.addEventListener("dragenter", over(true));
    zone.addEventListener("dragover", (event) => {
      event.preventDefault();
      if (event.dataTransfer) event.dataTransfer.dropEffect = this.writable ? "copy" : "none";
    });
    zone.addEventListener("dragleave", over(false));
    zone.addEventListener("drop", (event) => {
      event.preventDefault();
      zone.classList.remove("is-over");
      if (this.writable) this.upload([...(event.dataTransfer?.files || [])]);
      else toast("This session is closed; reopen it to upload.", "error");
    });
    this.uploadProgress = progress;
    return {
      el: h("div", {}, zone, progress, h("h3", { class: "sub-title" }, "Uploaded files"), this.artifactList),
      setEnabled: (on) => {
        choose.disabled = !on;
        zone.classList.toggle("is-disabled", !on);
      },
    };
  }

  async upload(files) {
    for (const file of files) {
      const bar = h("progress", { max: "100", value: "0", "aria-label": `Uploading ${file.name}` });
      const status = h("span", { class: "muted small" }, formatBytes(file.size));
      const item = h("li", { class: "upload-item" }, h("span", { class: "file-name" }, file.name), bar, status);
      this.uploadProgress.append(item);
      try {
        await uploadArtifact(this.sessionId, file, file.webkitRelativePath || file.name, (loaded, total) => {
          bar.value = Math.round((loaded / total) * 100);
        });
        item.remove();
        toast(`Uploaded ${file.name}.`);
      } catch (error) {
        bar.remove();
        status.textContent = `failed: ${error.message}`;
        status.className = "field-error";
      }
    }
    await this.loadArtifacts();
  }

  async loadArtifacts() {
    try {
      const answer = await agent(`/artifacts?sessionId=${encodeURIComponent(this.sessionId)}&limit=${PAGE}`);
      this.artifacts = itemsOf(answer);
      this.moreArtifacts = Boolean(answer?.nextCursor);
    } catch (error) {
      replace(this.artifactList, errorBox(error.message, "Could not list the uploaded files."));
      return;
    }
    const files = this.artifacts.map((a) => ({
      name: a.relativePath || a.fileName, path: a.relativePath || a.fileName, size: a.size, sha256: a.sha256,
      mediaType: a.mediaType, url: artifactUrl(a.id),
    }));
    replace(this.artifactList, fileTable(files, { caption: "Uploaded files", emptyText: "No files uploaded yet." }),
      this.moreArtifacts ? h("p", { class: "muted small" }, `Showing the latest ${PAGE} uploads.`) : null);
    const checked = new Set(this.attachedIds());
    const known = new Set([...this.attachList.querySelectorAll("input")].map((c) => c.value));
    replace(this.attachList, this.artifacts.length
      ? this.artifacts.map((a) => h("label", { class: "check" },
        h("input", { type: "checkbox", value: a.id, checked: checked.has(a.id) || !known.has(a.id) }),
        ` ${a.relativePath || a.fileName}`))
      : h("p", { class: "muted small" }, "Upload files to give them to a run."));
  }

  async loadRuns() {
    const ticket = (this.asked = (this.asked || 0) + 1);
    const answer = await agent(`/runs?sessionId=${encodeURIComponent(this.sessionId)}&limit=${PAGE}`);
    if (ticket < (this.answered || 0)) return;
    this.answered = ticket;
    this.runs = itemsOf(answer).sort((a, b) => String(b.createdAt).localeCompare(String(a.createdAt)));
    this.moreRuns = Boolean(answer?.nextCursor);
    this.renderRuns();
    this.renderChat();
  }

  renderRuns() {
    const focused = document.activeElement?.closest?.("#runs-table tr")?.dataset.runId;
    this.drawRuns();
    if (focused) this.runsTable.querySelector(`tr[data-run-id="${CSS.escape(focused)}"]`)?.focus();
  }

  drawRuns() {
    if (!this.runs.length) return replace(this.runsTable, h("p", { class: "muted" }, "No runs yet."));
    return replace(this.runsTable, this.moreRuns ? h("p", { class: "muted small" }, `Showing the latest ${PAGE} runs.`) : null,
      h("div", { class: "table-wrap" }, h("table", { class: "table", id: "runs-table" },
      h("caption", { class: "visually-hidden" }, "Runs of this session"),
      h("thead", {}, h("tr", {},
        h("th", { scope: "col" }, "State"), h("th", { scope: "col" }, "Prompt"),
        h("th", { scope: "col", class: "col-opt-2" }, "Started"), h("th", { scope: "col", class: "col-opt" }, "Duration"))),
      h("tbody", {}, this.runs.map((run) => {
        const tr = h("tr", {
          tabindex: "0", class: `row-link${run.id === this.selectedRunId ? " is-selected" : ""}`, "data-run-id": run.id,
          "aria-selected": run.id === this.selectedRunId ? "true" : "false", "aria-label": `Run ${run.id}, ${run.state}`,
        },
        h("td", {}, stateBadge(run.state)),
        h("td", { class: "cell-prompt" }, run.userPrompt),
        h("td", { class: "col-opt-2 nowrap" }, timeElement(run.startedAt || run.createdAt)),
        h("td", { class: "col-opt nowrap num" }, runDuration(run)));
        onActivate(tr, () => this.selectRun(run.id));
        return tr;
      })))));
  }

  async poll() {
    if (document.visibilityState !== "visible") return;
    if (!this.runs.some(isActiveRun) && !this.panel.active) return;
    try {
      await this.loadRuns();
      const selected = this.runs.find((r) => r.id === this.selectedRunId);
      if (selected) this.panel.update(selected);
    } catch {
      // the next poll tries again
    }
  }

  async reloadSession() {
    this.session = await agent(`/sessions/${encodeURIComponent(this.sessionId)}`);
    this.renderSession();
  }

  async toggleOpen() {
    const closing = this.writable;
    if (closing) {
      const ok = await confirmAction({
        title: "Close this session?",
        text: "Its history, files and runs are kept. New uploads and runs are refused until you reopen it.",
        confirmLabel: "Close session",
      });
      if (!ok) return;
    }
    this.toggle.disabled = true;
    try {
      await agent(`/sessions/${encodeURIComponent(this.sessionId)}/${closing ? "close" : "reopen"}`, { method: "POST" });
      await this.reloadSession();
      toast(closing ? "Session closed." : "Session reopened.");
    } catch (error) {
      toast(error.message, "error");
    } finally {
      this.toggle.disabled = false;
    }
  }

  async fork(runId) {
    const ok = await confirmAction({
      title: "Fork a new session from this run?",
      text: `The new session starts with the conversation up to run ${runId}, its files and the state folder as that run left it. This session is not changed.`,
      confirmLabel: "Fork session",
    });
    if (!ok) return;
    try {
      const fork = await agent(`/sessions/${encodeURIComponent(this.sessionId)}/fork`, { method: "POST", json: { runId } });
      toast("Session forked.");
      window.location.hash = `#/sessions/${encodeURIComponent(fork.id)}`;
    } catch (error) {
      toast(error.message, "error");
    }
  }

  async restore(runId) {
    const ok = await confirmAction({
      title: "Restore the state folder?",
      text: `The next run of this session starts from the state folder as run ${runId} left it. What later runs wrote there is replaced; the conversation is kept.`,
      confirmLabel: "Restore state",
    });
    if (!ok) return;
    try {
      await agent(`/sessions/${encodeURIComponent(this.sessionId)}/restore`, { method: "POST", json: { runId } });
      await this.reloadSession();
      toast("State restored.");
    } catch (error) {
      toast(error.message, "error");
    }
  }

  selectRun(runId) {
    this.selectedRunId = runId;
    this.renderRuns();
    this.panel.show(runId, this.runs.find((r) => r.id === runId));
  }
}

function message(role, content, createdAt, runId, note) {
  const who = role === "user" ? "you" : role === "assistant" ? "agent" : role;
  const kind = role === "user" || role === "system" ? role : "assistant";
  return h("li", { class: `msg msg-${kind}`, "data-run-id": runId || null },
    h("div", { class: "msg-meta" }, who, createdAt ? [" · ", timeElement(createdAt)] : null,
      note ? ` · ${note}` : null),
    // an answer is Markdown (sanitised); what a person typed stays the text it is
    kind === "assistant"
      ? h("div", { class: "msg-body markdown" }, renderMarkdown(content))
      : h("p", { class: "msg-body" }, content));
}
