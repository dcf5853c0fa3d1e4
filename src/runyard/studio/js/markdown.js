// A small, safe Markdown renderer for previews: headings, paragraphs, lists, pipe tables,
// fenced code, block quotes, rules, and inline code, emphasis, links and images.
// It builds DOM nodes with h(): text is always text, no HTML in the source is ever parsed,
// so a report cannot run script or load anything but what `resolveImage` hands back.

import { h } from "./dom.js";

const SAFE_LINK = /^(https?:|mailto:)/i;
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|!\[([^\]]*)\]\(([^)\s]+)\)|\[([^\]]+)\]\(([^)\s]+)\)|\*\*([^*]+)\*\*|__([^_]+)__|\*([^*\s][^*]*)\*|_([^_\s][^_]*)_/;

/**
 * Render `text` as an array of block elements. `resolveImage(src)` answers a Promise of a URL
 * the page may load (e.g. an object URL of a fetched file) or null; images start empty.
 */
export function renderMarkdown(text, { resolveImage = async () => null } = {}) {
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
  const context = { resolveImage };
  const blocks = [];
  let at = 0;
  while (at < lines.length) {
    const [block, next] = readBlock(lines, at, context);
    if (block) blocks.push(block);
    at = Math.max(next, at + 1);
  }
  return blocks;
}

function readBlock(lines, at, context) {
  const line = lines[at];
  if (!line.trim()) return [null, at + 1];
  const heading = /^(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line);
  if (heading) return [h(`h${heading[1].length}`, {}, inline(heading[2], context)), at + 1];
  if (/^\s*(```|~~~)/.test(line)) return fence(lines, at);
  if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) return [h("hr", {}), at + 1];
  if (/^\s*>/.test(line)) return quote(lines, at, context);
  if (isTableStart(lines, at)) return table(lines, at, context);
  if (/^\s*([-*+]|\d+[.)])\s+/.test(line)) return list(lines, at, context);
  return paragraph(lines, at, context);
}

function fence(lines, at) {
  const marker = lines[at].trim().slice(0, 3);
  const body = [];
  let next = at + 1;
  while (next < lines.length && !lines[next].trim().startsWith(marker)) body.push(lines[next++]);
  return [h("pre", { class: "md-code" }, h("code", {}, body.join("\n"))), next + 1];
}

function quote(lines, at, context) {
  const body = [];
  let next = at;
  while (next < lines.length && /^\s*>/.test(lines[next])) body.push(lines[next++].replace(/^\s*>\s?/, ""));
  return [h("blockquote", {}, renderMarkdown(body.join("\n"), context)), next];
}

function splitRow(line) {
  const trimmed = line.trim().replace(/^\|/, "").replace(/(?<!\\)\|$/, "");
  return trimmed.split(/(?<!\\)\|/).map((cell) => cell.trim().replace(/\\\|/g, "|"));
}

function isTableStart(lines, at) {
  if (!lines[at].includes("|") || at + 1 >= lines.length) return false;
  return /^\s*\|?\s*:?-{1,}:?\s*(\|\s*:?-{1,}:?\s*)*\|?\s*$/.test(lines[at + 1]);
}

function table(lines, at, context) {
  const head = splitRow(lines[at]);
  const aligns = splitRow(lines[at + 1]).map((cell) =>
    cell.endsWith(":") ? (cell.startsWith(":") ? "center" : "right") : cell.startsWith(":") ? "left" : null);
  const rows = [];
  let next = at + 2;
  while (next < lines.length && lines[next].includes("|") && lines[next].trim()) rows.push(splitRow(lines[next++]));
  // a class, not a style attribute: the Studio's CSP allows no inline styles
  const cell = (tag, text, index) =>
    h(tag, aligns[index] === "right" ? { class: "num" } : {}, inline(text, context));
  return [h("div", { class: "table-wrap" },
    h("table", { class: "table md-table" },
      h("thead", {}, h("tr", {}, head.map((text, i) => cell("th", text, i)))),
      h("tbody", {}, rows.map((row) => h("tr", {}, head.map((_, i) => cell("td", row[i] ?? "", i))))))), next];
}

function list(lines, at, context) {
  const ordered = /^\s*\d+[.)]\s+/.test(lines[at]);
  const items = [];
  let next = at;
  while (next < lines.length && /^\s*([-*+]|\d+[.)])\s+/.test(lines[next])) {
    items.push(lines[next].replace(/^\s*([-*+]|\d+[.)])\s+/, ""));
    next++;
    while (next < lines.length && /^\s{2,}\S/.test(lines[next]) && !/^\s*([-*+]|\d+[.)])\s+/.test(lines[next])) {
      items[items.length - 1] += ` ${lines[next++].trim()}`;
    }
  }
  return [h(ordered ? "ol" : "ul", {}, items.map((item) => h("li", {}, inline(item, context)))), next];
}

function paragraph(lines, at, context) {
  const body = [];
  let next = at;
  while (next < lines.length && lines[next].trim() && !startsBlock(lines, next)) body.push(lines[next++].trim());
  if (!body.length) body.push(lines[next++].trim());
  return [h("p", {}, inline(body.join(" "), context)), next];
}

function startsBlock(lines, at) {
  const line = lines[at];
  return /^(#{1,6})\s/.test(line) || /^\s*(```|~~~|>)/.test(line) || /^\s*([-*+]|\d+[.)])\s+/.test(line) ||
    isTableStart(lines, at);
}

/** Inline spans of `text` as nodes; anything unmatched stays plain text. */
export function inline(text, context = { resolveImage: async () => null }) {
  const out = [];
  let rest = String(text);
  for (let match = INLINE.exec(rest); match; match = INLINE.exec(rest)) {
    if (match.index) out.push(rest.slice(0, match.index));
    out.push(span(match, context));
    rest = rest.slice(match.index + match[0].length);
  }
  if (rest) out.push(rest);
  return out;
}

function span(match, context) {
  const [, ticks, code, alt, src, label, href, strong1, strong2, em1, em2] = match;
  if (ticks) return h("code", {}, code.trim());
  if (src !== undefined) return image(alt, src, context);
  if (label !== undefined) {
    return SAFE_LINK.test(href)
      ? h("a", { href, rel: "noopener noreferrer nofollow", target: "_blank" }, inline(label, context))
      : h("span", { class: "md-link", title: href }, inline(label, context));
  }
  if (strong1 || strong2) return h("strong", {}, inline(strong1 || strong2, context));
  return h("em", {}, inline(em1 || em2, context));
}

function image(alt, src, context) {
  const img = h("img", { class: "preview-image md-image", alt, "data-src": src, loading: "lazy" });
  Promise.resolve()
    .then(() => context.resolveImage(src))
    .then((url) => {
      if (url) img.src = url;
      else img.replaceWith(h("span", { class: "muted small" }, `[image not shown: ${alt || src}]`));
    })
    .catch(() => img.replaceWith(h("span", { class: "muted small" }, `[image not loaded: ${alt || src}]`)));
  return img;
}
