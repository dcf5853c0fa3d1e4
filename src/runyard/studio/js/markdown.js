// Markdown for reports and agent answers: parsed by marked (CommonMark + GFM tables), then
// cleaned by DOMPurify; both vendored under js/vendor (see VENDORED.txt), nothing from a CDN.
//
// Three layers keep a document from running anything: raw HTML in the source is shown as
// text (never parsed as HTML); DOMPurify drops scripts, event handlers, styles (the CSP
// allows no inline style) and unsafe URLs; and links are kept only for http(s)/mailto, while
// images load only what `resolveImage` hands back (never the document's own URL).

import { Marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.js";

const SAFE_LINK = /^(https?:|mailto:)/i;

const escapeHtml = (text) =>
  String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

const marked = new Marked({
  gfm: true,
  breaks: false,
  async: false,
  // Raw HTML is not recognised at all (no token: the line stays Markdown text, escaped like
  // any text); should a token still come, it is rendered as the text it is.
  tokenizer: {
    html() {
      return undefined;
    },
    tag() {
      return undefined;
    },
  },
  renderer: {
    html({ text }) {
      return escapeHtml(text);
    },
  },
});

const purifier = DOMPurify(window);
purifier.addHook("afterSanitizeAttributes", (node) => {
  // runs in DOMPurify's inert document, before anything reaches the page: an image keeps
  // its source only as data, so the page never fetches it by itself
  if (node.nodeName === "IMG") {
    node.setAttribute("data-src", node.getAttribute("src") || "");
    node.removeAttribute("src");
    node.removeAttribute("srcset");
  }
});

const PURIFY = {
  RETURN_DOM_FRAGMENT: true,
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed"],
  FORBID_ATTR: ["style", "srcset", "action", "formaction"],
  ALLOW_DATA_ATTR: false,
};

/** Markdown `text` as sanitised HTML markup (a string), before links and images are fixed. */
export function markdownToSafeHtml(text) {
  return purifier.sanitize(marked.parse(String(text ?? "")), { ...PURIFY, RETURN_DOM_FRAGMENT: false });
}

/**
 * Render `text` as an array of nodes. `resolveImage(src)` answers a Promise of a URL the
 * page may load (e.g. an object URL of a fetched file) or null; images start empty.
 */
export function renderMarkdown(text, { resolveImage = async () => null } = {}) {
  const fragment = purifier.sanitize(marked.parse(String(text ?? "")), PURIFY);
  for (const link of fragment.querySelectorAll("a")) fixLink(link);
  for (const img of fragment.querySelectorAll("img")) fixImage(img, resolveImage);
  for (const table of fragment.querySelectorAll("table")) {
    table.classList.add("table", "md-table");
    const wrap = document.createElement("div");
    wrap.className = "table-wrap";
    table.replaceWith(wrap);
    wrap.append(table);
  }
  for (const cell of fragment.querySelectorAll("th[align], td[align]")) {
    if (cell.getAttribute("align") === "right") cell.classList.add("num");
    cell.removeAttribute("align");
  }
  for (const pre of fragment.querySelectorAll("pre")) {
    pre.classList.add("md-code");
    const last = pre.querySelector("code")?.lastChild;
    if (last?.nodeType === Node.TEXT_NODE) last.textContent = last.textContent.replace(/\n$/, "");
  }
  return [...fragment.childNodes];
}

function fixLink(link) {
  const href = link.getAttribute("href") || "";
  if (SAFE_LINK.test(href)) {
    link.setAttribute("rel", "noopener noreferrer nofollow");
    link.setAttribute("target", "_blank");
    return;
  }
  // anything else (javascript:, data:, relative paths) is kept as text, its target shown
  const span = document.createElement("span");
  span.className = "md-link";
  if (href) span.title = href;
  span.append(...link.childNodes);
  link.replaceWith(span);
}

function fixImage(img, resolveImage) {
  const src = img.dataset.src || "";
  const alt = img.getAttribute("alt") || "";
  img.className = "preview-image md-image";
  img.loading = "lazy";
  const placeholder = (why) => {
    const span = document.createElement("span");
    span.className = "muted small";
    span.textContent = `[image ${why}: ${alt || src}]`;
    img.replaceWith(span);
  };
  Promise.resolve()
    .then(() => (src ? resolveImage(src) : null))
    .then((url) => (url ? (img.src = url) : placeholder("not shown")))
    .catch(() => placeholder("not loaded"));
}
