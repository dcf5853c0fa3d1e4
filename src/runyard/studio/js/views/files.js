// File tables (task artifacts, uploads, run outputs): size, sha256, download through a Blob
// (the token travels as a header, so no plain link can fetch the bytes) and previews of text,
// JSON, CSV and Parquet (as tables; Parquet rows are read by the server), images, and Markdown
// (rendered safely, its images fetched from the same task). Previews are read with a byte cap.

import { apiFetch, encodePath, errorMessage, fetchFile } from "../api.js";
import { copyText, errorBox, h, replace, spinner } from "../dom.js";
import { formatBytes, shortHash } from "../format.js";
import { renderMarkdown } from "../markdown.js";
import { toast } from "../ui.js";

const TEXT_CAP = 256 * 1024;
const JSON_CAP = 2 * 1024 * 1024;
const CSV_CAP = 1024 * 1024;
const IMAGE_CAP = 25 * 1024 * 1024;
const CSV_ROWS = 200;
const PARQUET_ROWS = 100;
const MARKDOWN_IMAGES = 50;
const MARKDOWN_EXTENSIONS = new Set(["md", "markdown"]);
const TASK_FILE_URL = /^\/api\/v1\/tasks\/[^/]+\/files\//;
// Markdown image targets refused once decoded: a scheme, a rooted path, a backslash (a
// separator to some parsers), a NUL; and the folders image targets may resolve below
const UNSAFE_TARGET = /^[a-z][a-z0-9+.-]*:|^\/|[\\\0]/i;
const FILES_BASE = /^\/api\/v1\/(?:tasks|runs)\/[^/]+\/files\/$/;

const IMAGE_TYPES = {
  png: "image/png", jpg: "image/jpeg", jpeg: "image/jpeg", gif: "image/gif", webp: "image/webp",
  bmp: "image/bmp", ico: "image/x-icon", svg: "image/svg+xml", avif: "image/avif",
};
const TEXT_EXTENSIONS = new Set([
  "txt", "md", "markdown", "log", "out", "err", "py", "r", "sql", "sh", "yaml", "yml", "toml", "ini",
  "cfg", "conf", "xml", "html", "htm", "css", "js", "mjs", "ts", "ipynb", "jsonl", "ndjson", "rst",
  "tex", "diff", "patch", "env", "properties", "c", "h", "cpp", "java", "go", "rs", "rb", "pl", "lua",
]);

export function extension(path) {
  const base = String(path || "").split("/").pop();
  const dot = base.lastIndexOf(".");
  return dot > 0 ? base.slice(dot + 1).toLowerCase() : "";
}

/** "image" | "json" | "csv" | "parquet" | "text" | null, from the file name (then its media
 * type). Markdown is "text", shown rendered with its source beside it. */
export function previewKind(path, mediaType = "") {
  const ext = extension(path);
  if (ext in IMAGE_TYPES) return "image";
  if (ext === "parquet") return "parquet";
  if (ext === "json") return "json";
  if (ext === "csv" || ext === "tsv") return "csv";
  if (TEXT_EXTENSIONS.has(ext)) return "text";
  const type = String(mediaType || "").toLowerCase();
  if (type.startsWith("image/")) return "image";
  if (type.includes("json")) return "json";
  if (type.includes("csv")) return "csv";
  if (type.startsWith("text/")) return "text";
  return null;
}

/** Parse CSV text (RFC 4180 quoting) into rows of cells; stops after `maxRows` rows. */
export function parseCsv(text, delimiter = ",", maxRows = Infinity) {
  const rows = [];
  let row = [];
  let cell = "";
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        cell += '"';
        i++;
      } else if (c === '"') quoted = false;
      else cell += c;
    } else if (c === '"' && cell === "") quoted = true;
    else if (c === delimiter) {
      row.push(cell);
      cell = "";
    } else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i++;
      row.push(cell);
      rows.push(row);
      row = [];
      cell = "";
      if (rows.length >= maxRows) return rows;
    } else cell += c;
  }
  if (cell !== "" || row.length) {
    row.push(cell);
    rows.push(row);
  }
  return rows;
}

/** Read at most `cap` bytes of a response; answers {bytes, truncated}. */
export async function readCapped(response, cap) {
  const reader = response.body.getReader();
  const parts = [];
  let total = 0;
  let truncated = false;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    parts.push(value);
    total += value.length;
    if (total >= cap) {
      truncated = true;
      await reader.cancel().catch(() => {});
      break;
    }
  }
  const bytes = new Uint8Array(Math.min(total, cap));
  let at = 0;
  for (const part of parts) {
    const take = part.subarray(0, Math.min(part.length, bytes.length - at));
    bytes.set(take, at);
    at += take.length;
    if (at >= bytes.length) break;
  }
  const ranged = response.status === 206;
  const full = Number(response.headers.get("content-range")?.split("/")[1]);
  return { bytes, truncated: truncated || (ranged && Number.isFinite(full) && full > bytes.length) };
}

function baseName(path) {
  return String(path).split("/").filter(Boolean).pop() || "download";
}

/** Fetch a file with the token and hand it to the browser as a download. */
export async function downloadFile(url, fileName) {
  const response = await fetchFile(url);
  const blob = await response.blob();
  const href = URL.createObjectURL(blob);
  const link = h("a", { href, download: baseName(fileName), hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(href), 60_000);
}

/**
 * The file a table opens at once with `openSingle`: its one Markdown file (a report), else
 * its one image; null when there is none or more than one. Answers {file, kind}.
 */
export function singlePreview(files) {
  const named = (file) => file.path || file.name;
  const markdown = files.filter((file) => MARKDOWN_EXTENSIONS.has(extension(named(file))));
  if (markdown.length) return markdown.length === 1 ? { file: markdown[0], kind: "text" } : null;
  const images = files.filter((file) => previewKind(named(file), file.mediaType) === "image");
  return images.length === 1 ? { file: images[0], kind: "image" } : null;
}

/**
 * A table of files with download and preview. Each file: {name, path, size, sha256, url,
 * mediaType}. Answers the element; the preview opens below the table. With `openSingle`, the
 * table's single Markdown or image file (see singlePreview) is previewed at once, under the
 * same caps as a click (it starts before the table is in the page, so it takes no focus).
 */
export function fileTable(files, { caption, emptyText = "No files.", id, openSingle = false } = {}) {
  const preview = new Preview();
  if (!files.length) return h("p", { class: "muted" }, emptyText);
  const hashes = files.some((file) => file.sha256);
  const tbody = h("tbody", {}, files.map((file) => fileRow(file, preview, hashes)));
  const opened = openSingle ? singlePreview(files) : null;
  if (opened) preview.show(opened.file, opened.kind);
  return h("div", { class: "files", id },
    h("div", { class: "table-wrap" },
      h("table", { class: "table files-table" },
        caption ? h("caption", { class: "visually-hidden" }, caption) : null,
        h("thead", {}, h("tr", {},
          h("th", { scope: "col" }, "Name"),
          h("th", { scope: "col", class: "num" }, "Size"),
          hashes ? h("th", { scope: "col", class: "col-opt" }, "SHA-256") : null,
          h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Actions")))),
        tbody)),
    preview.el);
}

function fileRow(file, preview, hashes) {
  const kind = previewKind(file.path || file.name, file.mediaType);
  const download = h("button", { type: "button", class: "btn btn-small", "aria-label": `Download ${file.name}` }, "Download");
  download.addEventListener("click", async () => {
    download.disabled = true;
    try {
      await downloadFile(file.url, file.path || file.name);
    } catch (error) {
      toast(`Download of ${file.name} failed: ${error.message}`, "error");
    } finally {
      download.disabled = false;
    }
  });
  const open = kind && (kind !== "parquet" || TASK_FILE_URL.test(file.url))
    ? h("button", { type: "button", class: "btn btn-small", "aria-label": `Preview ${file.name}`,
      onclick: () => preview.show(file, kind) }, "Preview")
    : null;
  const hash = file.sha256
    ? h("span", { class: "hash" }, h("code", { title: file.sha256, "data-sha256": file.sha256 }, shortHash(file.sha256)),
      h("button", { type: "button", class: "btn btn-tiny", "aria-label": `Copy SHA-256 of ${file.name}`,
        onclick: async () => toast(await copyText(file.sha256) ? "SHA-256 copied" : "Could not copy") }, "Copy"))
    : "—";
  const pathNote = file.path && file.path !== file.name ? h("div", { class: "muted small" }, file.path) : null;
  return h("tr", { "data-file": file.name },
    h("th", { scope: "row", class: "cell-file" }, h("span", { class: "file-name" }, file.name), pathNote),
    h("td", { class: "num nowrap" }, formatBytes(file.size)),
    hashes ? h("td", { class: "col-opt" }, hash) : null,
    h("td", { class: "cell-actions" }, h("div", { class: "actions file-actions" }, open, download)));
}

class Preview {
  constructor() {
    this.el = h("div", { class: "preview", hidden: true, "aria-live": "polite" });
    this.objectUrl = null;
    this.objectUrls = [];
    this.abort = null;
  }

  close() {
    this.abort?.abort();
    if (this.objectUrl) URL.revokeObjectURL(this.objectUrl);
    this.objectUrls.forEach((url) => URL.revokeObjectURL(url));
    this.objectUrls = [];
    this.objectUrl = null;
    replace(this.el);
    this.el.hidden = true;
  }

  async show(file, kind) {
    this.close();
    const abort = new AbortController();
    this.abort = abort;
    const body = h("div", { class: "preview-body" }, spinner("Loading preview…"));
    const closeButton = h("button", { type: "button", class: "btn btn-small", onclick: () => this.close() }, "Close preview");
    const heading = h("h3", { class: "preview-title", tabindex: "-1" }, `Preview: ${file.name}`);
    replace(this.el,
      h("div", { class: "preview-head" }, heading, closeButton),
      file.sha256 ? h("p", { class: "muted small hash-full" }, "sha256 ", h("code", {}, file.sha256)) : null,
      body);
    this.el.hidden = false;
    heading.focus(); // a no-op for a table's first preview: it is not in the page yet
    try {
      const content = await this.render(file, kind, abort.signal);
      if (!abort.signal.aborted) replace(body, content);
    } catch (error) {
      if (!abort.signal.aborted) replace(body, errorBox(error.message, "Could not preview this file."));
    }
  }

  async render(file, kind, signal) {
    if (kind === "image") return this.image(file, signal);
    if (kind === "parquet") return parquetPreview(file, signal);
    const cap = { json: JSON_CAP, csv: CSV_CAP }[kind] || TEXT_CAP;
    const response = await fetchFile(file.url, { signal, range: file.size > cap ? cap : 0 });
    const { bytes, truncated } = await readCapped(response, cap);
    const text = new TextDecoder().decode(bytes);
    const note = truncated ? h("p", { class: "muted small" }, `Showing the first ${formatBytes(bytes.length)} of ${formatBytes(file.size)}.`) : null;
    if (kind === "json" && !truncated) return jsonPreview(text);
    if (kind === "csv") return [note, csvPreview(text, extension(file.path || file.name) === "tsv" ? "\t" : ",")];
    if (MARKDOWN_EXTENSIONS.has(extension(file.path || file.name))) return [note, this.markdown(file, text, signal)];
    return [note, h("pre", { class: "preview-text", tabindex: "0" }, text)];
  }

  async image(file, signal) {
    if (file.size > IMAGE_CAP) return h("p", { class: "muted" }, `Too large to preview (${formatBytes(file.size)}); download it instead.`);
    const response = await fetchFile(file.url, { signal });
    let blob = await response.blob();
    const type = IMAGE_TYPES[extension(file.path || file.name)];
    if (type && blob.type !== type) blob = new Blob([blob], { type });
    this.objectUrl = URL.createObjectURL(blob);
    return h("img", { class: "preview-image", src: this.objectUrl, alt: `Preview of ${file.name}` });
  }

  markdown(file, text, signal) {
    let budget = MARKDOWN_IMAGES;
    const resolveImage = async (src) => {
      const url = siblingUrl(file, src);
      if (!url || !(extension(src) in IMAGE_TYPES) || budget-- <= 0) return null;
      const response = await fetchFile(url, { signal });
      const { bytes, truncated } = await readCapped(response, IMAGE_CAP + 1);
      if (truncated || bytes.length > IMAGE_CAP || signal.aborted) return null;
      const blob = new Blob([bytes], { type: IMAGE_TYPES[extension(src)] });
      const objectUrl = URL.createObjectURL(blob);
      this.objectUrls.push(objectUrl);
      return objectUrl;
    };
    const rendered = h("div", { class: "preview-markdown markdown" }, renderMarkdown(text, { resolveImage }));
    const source = h("pre", { class: "preview-text", tabindex: "0", hidden: true }, text);
    const toggle = h("button", { type: "button", class: "btn btn-small", "aria-pressed": "false" }, "Show source");
    toggle.addEventListener("click", () => {
      const showSource = source.hidden;
      source.hidden = !showSource;
      rendered.hidden = showSource;
      toggle.textContent = showSource ? "Show rendered" : "Show source";
      toggle.setAttribute("aria-pressed", String(showSource));
    });
    return [h("div", { class: "actions" }, toggle), rendered, source];
  }
}

/**
 * The URL of the image `src` names, relative to `file`, when it is one of the same task's or
 * run's files; null for anything else. A Markdown file is written by code the server does
 * not trust and the Studio fetches with its token, so `src` is percent-decoded first, then
 * its `.`/`..` resolved from the file's folder: a target with a scheme, an absolute path, a
 * backslash, a bad escape, or one climbing above the task's or run's files is refused.
 */
export function siblingUrl(file, src) {
  const base = filesBase(file);
  const target = decodeTarget(String(src).split(/[?#]/)[0]);
  if (base === null || target === null || UNSAFE_TARGET.test(target)) return null;
  const parts = String(file.path).split("/").slice(0, -1);
  for (const part of target.split("/")) {
    if (part === "..") {
      if (!parts.length) return null;
      parts.pop();
    } else if (part && part !== ".") parts.push(part);
  }
  if (!parts.length) return null;
  const url = base + encodePath(parts.join("/"));
  // what the browser will ask for, after its own URL parsing, must still be a file below
  return new URL(url, location.origin).pathname.startsWith(base) ? url : null;
}

/** "/api/v1/tasks/<id>/files/" (or a run's) that `file.url` is `file.path` below; null when
 * the file is not a task's or run's file (an upload, a forged URL). */
function filesBase(file) {
  const path = String(file.path || "");
  const url = String(file.url || "");
  const ownPath = encodePath(path);
  if (!path || !url.endsWith(ownPath)) return null;
  const base = url.slice(0, -ownPath.length);
  if (!FILES_BASE.test(base) || new URL(base, location.origin).pathname !== base) return null;
  return base;
}

function decodeTarget(text) {
  try {
    return decodeURIComponent(text);
  } catch {
    return null;
  }
}

async function parquetPreview(file, signal) {
  const url = `${file.url.replace(TASK_FILE_URL, (m) => m.replace(/\/files\/$/, "/preview/"))}?limit=${PARQUET_ROWS}`;
  const response = await apiFetch(url, { signal, headers: { Accept: "application/json" } });
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new Error(errorMessage(body, response.status));
  const { columns = [], rows = [], total_rows: total = rows.length, truncated = {} } = body || {};
  const shown = `Showing ${rows.length} of ${total} rows${truncated.columns ? ` and the first ${columns.length} columns` : ""}.`;
  return h("div", { class: "parquet-preview" },
    h("p", { class: "muted small" }, shown),
    h("div", { class: "table-wrap preview-table-wrap", tabindex: "0" },
      h("table", { class: "table preview-table" },
        h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", title: c.type }, c.name)))),
        h("tbody", {}, rows.map((row) => h("tr", {}, row.map((cell) => h("td", {}, cell === null ? "" : String(cell)))))))));
}

function jsonPreview(text) {
  try {
    return h("pre", { class: "preview-text preview-json", tabindex: "0" }, JSON.stringify(JSON.parse(text), null, 2));
  } catch (error) {
    return [h("p", { class: "muted small" }, `Not valid JSON (${error.message}); shown as text.`),
      h("pre", { class: "preview-text", tabindex: "0" }, text)];
  }
}

function csvPreview(text, delimiter) {
  const rows = parseCsv(text, delimiter, CSV_ROWS + 1);
  if (!rows.length) return h("p", { class: "muted" }, "The file is empty.");
  const [head, ...rest] = rows;
  const shown = rest.slice(0, CSV_ROWS);
  return h("div", {},
    rest.length > CSV_ROWS ? h("p", { class: "muted small" }, `Showing the first ${CSV_ROWS} rows.`) : null,
    h("div", { class: "table-wrap preview-table-wrap", tabindex: "0" },
      h("table", { class: "table preview-table" },
        h("thead", {}, h("tr", {}, head.map((cell) => h("th", { scope: "col" }, cell)))),
        h("tbody", {}, shown.map((row) => h("tr", {}, row.map((cell) => h("td", {}, cell))))))));
}
