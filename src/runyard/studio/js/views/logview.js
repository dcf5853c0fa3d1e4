// A task's log shown through bounded byte windows (read_task_log): the tail first, earlier
// windows on demand when scrolling back, live chunks appended while the task runs. At most
// `maxBytes` are kept in the page; the far end is dropped and can be loaded again.

import { jobAnswer } from "../api.js";
import { h, setText } from "../dom.js";
import { formatBytes } from "../format.js";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The part of `content` (which starts at byte `start`) that lies inside [from, to). */
export function sliceBytes(content, start, from, to) {
  const bytes = encoder.encode(content);
  const begin = Math.max(0, from - start);
  const end = Math.min(bytes.length, to - start);
  if (begin === 0 && end === bytes.length) return content;
  return decoder.decode(bytes.subarray(begin, Math.max(begin, end)));
}

export class LogView {
  constructor(taskId, { windowBytes = 65536, maxBytes = 2 * 1024 * 1024 } = {}) {
    this.taskId = taskId;
    this.windowBytes = windowBytes;
    this.maxBytes = maxBytes;
    this.segments = [];
    this.start = 0;
    this.end = 0;
    this.fileSize = 0;
    this.detached = false;
    this.loadingEarlier = false;
    this.build();
  }

  build() {
    this.pre = h("pre", { class: "log", id: "task-log", tabindex: "0", "aria-label": "Task log", "aria-live": "off" });
    this.empty = h("p", { class: "muted log-empty" }, "The log is empty.");
    this.earlier = h("button", { type: "button", class: "btn btn-small", id: "log-earlier", hidden: true,
      onclick: () => this.loadEarlier() }, "Load earlier");
    this.latest = h("button", { type: "button", class: "btn btn-small", id: "log-latest", hidden: true,
      onclick: () => this.loadTail() }, "Jump to latest");
    this.info = h("span", { class: "muted log-info", id: "log-info" });
    const wrap = h("input", { type: "checkbox", id: "log-wrap" });
    wrap.addEventListener("change", () => this.pre.classList.toggle("log-wrap", wrap.checked));
    this.el = h("div", { class: "logview" },
      h("div", { class: "log-toolbar" }, this.earlier, this.info,
        h("label", { class: "check" }, wrap, " Wrap lines"), this.latest),
      this.empty, this.pre);
    this.pre.addEventListener("scroll", () => {
      if (this.pre.scrollTop < 24 && this.hasMoreBefore) this.loadEarlier();
    });
  }

  get hasMoreBefore() {
    return this.start > 0;
  }

  get size() {
    return this.end - this.start;
  }

  atBottom() {
    return this.pre.scrollHeight - this.pre.scrollTop - this.pre.clientHeight < 32;
  }

  async read(offset, limit) {
    return jobAnswer("read_task_log", { task_id: this.taskId, offset, limit });
  }

  /** Show the last window of the log, replacing whatever is shown. */
  async loadTail() {
    const chunk = await this.read(-1, this.windowBytes);
    this.segments = [];
    this.pre.replaceChildren();
    this.start = chunk.start_offset;
    this.end = chunk.start_offset;
    this.detached = false;
    this.push(chunk.content, chunk.start_offset, chunk.next_offset);
    this.fileSize = chunk.file_size;
    this.refresh();
    this.pre.scrollTop = this.pre.scrollHeight;
  }

  /** A live chunk (a TaskLogChunk from the stream). */
  async appendChunk(chunk) {
    this.fileSize = Math.max(this.fileSize, chunk.file_size ?? chunk.next_offset);
    if (this.detached) return this.refresh();
    if (chunk.reset || chunk.start_offset > this.end) return this.loadTail();
    if (chunk.next_offset <= this.end) return this.refresh();
    const follow = this.atBottom();
    const text = sliceBytes(chunk.content, chunk.start_offset, this.end, chunk.next_offset);
    this.push(text, this.end, chunk.next_offset);
    this.dropFromStart();
    this.refresh();
    if (follow) this.pre.scrollTop = this.pre.scrollHeight;
    return undefined;
  }

  push(text, start, end) {
    const node = document.createTextNode(text);
    this.pre.append(node);
    this.segments.push({ start, end, node });
    this.end = end;
  }

  dropFromStart() {
    while (this.size > this.maxBytes && this.segments.length > 1) {
      const first = this.segments.shift();
      first.node.remove();
      this.start = this.segments[0].start;
    }
  }

  dropFromEnd() {
    while (this.size > this.maxBytes && this.segments.length > 1) {
      const last = this.segments.pop();
      last.node.remove();
      this.end = this.segments.at(-1).end;
      this.detached = true;
    }
  }

  /** Read the window just before what is shown and put it on top, keeping the scroll place. */
  async loadEarlier() {
    if (!this.hasMoreBefore || this.loadingEarlier) return;
    this.loadingEarlier = true;
    this.earlier.disabled = true;
    try {
      const offset = Math.max(0, this.start - this.windowBytes);
      const limit = Math.max(1024, this.start - offset);
      const chunk = await this.read(offset, limit);
      const text = sliceBytes(chunk.content, chunk.start_offset, chunk.start_offset, this.start);
      const before = this.pre.scrollHeight;
      const node = document.createTextNode(text);
      this.pre.prepend(node);
      this.segments.unshift({ start: chunk.start_offset, end: this.start, node });
      this.start = chunk.start_offset;
      this.pre.scrollTop += this.pre.scrollHeight - before;
      this.dropFromEnd();
    } finally {
      this.loadingEarlier = false;
      this.earlier.disabled = false;
      this.refresh();
    }
  }

  refresh() {
    const shown = this.size;
    this.empty.hidden = shown > 0 || this.fileSize > 0;
    this.pre.hidden = !this.empty.hidden;
    this.earlier.hidden = !this.hasMoreBefore;
    this.latest.hidden = !this.detached;
    const range = `bytes ${this.start.toLocaleString()}–${this.end.toLocaleString()}`;
    setText(this.info, shown || this.fileSize
      ? `Showing ${range} of ${formatBytes(this.fileSize)}${this.detached ? " · newer output not shown" : ""}`
      : "");
  }
}
