// Building DOM from data. Text always goes in as text nodes: nothing from a record, a log or
// a file preview is ever parsed as HTML.

const SVG_NS = "http://www.w3.org/2000/svg";
const PROPERTIES = new Set(["value", "checked", "selected", "disabled", "hidden", "indeterminate"]);

/** h("div", {class: "x", onclick: fn}, "text", child) — "svg:rect" makes an SVG element. */
export function h(tag, attrs, ...children) {
  const svg = tag.startsWith("svg:");
  const el = svg ? document.createElementNS(SVG_NS, tag.slice(4)) : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    setAttribute(el, key, value);
  }
  append(el, children);
  return el;
}

function setAttribute(el, key, value) {
  if (value === null || value === undefined || value === false) return;
  if (key.startsWith("on") && typeof value === "function") {
    el.addEventListener(key.slice(2), value);
  } else if (key === "dataset") {
    Object.assign(el.dataset, value);
  } else if (PROPERTIES.has(key)) {
    el[key] = value;
  } else {
    el.setAttribute(key, value === true ? "" : String(value));
  }
}

export function append(el, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

export function clear(el) {
  el.replaceChildren();
  return el;
}

export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** An element's text, set safely (used for live values that change). */
export function setText(el, text) {
  if (el.textContent !== String(text)) el.textContent = String(text);
}

/** Enter and Space activate a custom focusable element (rows, graph nodes). */
export function onActivate(el, handler) {
  el.addEventListener("click", (event) => {
    if (event.target.closest("a, button, input, select, textarea, label")) return;
    handler(event);
  });
  el.addEventListener("keydown", (event) => {
    if (event.target !== el) return;
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      handler(event);
    }
  });
}

export function stateBadge(state) {
  const text = state || "unknown";
  return h("span", { class: `badge state-${text}`, "data-state": text }, text);
}

export function spinner(label = "Loading…") {
  return h("p", { class: "loading", role: "status" }, h("span", { class: "spin", "aria-hidden": "true" }), label);
}

export function errorBox(message, title = "Something went wrong") {
  return h("div", { class: "alert alert-error", role: "alert" },
    h("strong", {}, title), " ", h("span", { class: "alert-text" }, message));
}

export function section(title, ...children) {
  const id = `sec-${title.toLowerCase().replace(/[^a-z0-9]+/g, "-")}`;
  return h("section", { class: "panel", "aria-labelledby": id },
    h("h2", { id, class: "panel-title" }, title), ...children);
}

/** A definition list from [label, value] pairs (values may be nodes). */
export function facts(pairs) {
  const dl = h("dl", { class: "facts" });
  for (const [label, value] of pairs) {
    dl.append(h("dt", {}, label), h("dd", {}, value === "" || value == null ? "—" : value));
  }
  return dl;
}

/** Copy text to the clipboard; returns whether it worked. */
export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    return false;
  }
}
