// Shared bits of interface: notices, the confirmation dialog, route links.

import { h } from "./dom.js";

/** A short notice in the polite live region; it fades after a while. */
export function toast(message, kind = "info") {
  const region = document.getElementById("toasts");
  const item = h("div", { class: `toast toast-${kind}` }, message);
  region.append(item);
  while (region.children.length > 3) region.firstElementChild.remove();
  setTimeout(() => item.remove(), kind === "error" ? 9000 : 4000);
}

/** Ask before doing something that cannot be undone; resolves true when confirmed. */
export function confirmAction({ title, text, confirmLabel = "Confirm", danger = true }) {
  const dialog = document.getElementById("confirm-dialog");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  const ok = document.getElementById("confirm-ok");
  ok.textContent = confirmLabel;
  ok.className = danger ? "btn btn-danger" : "btn btn-primary";
  dialog.returnValue = "cancel";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
    document.getElementById("confirm-cancel").focus();
  });
}

/** Routes are hash fragments: ``#/tasks/<encoded id>``; ids may contain ``#``. */
export function routeHref(...parts) {
  const [path, query] = parts.at(-1) instanceof Object ? [parts.slice(0, -1), parts.at(-1)] : [parts, null];
  const hash = `#/${path.map((p) => encodeURIComponent(p)).join("/")}`;
  const search = query ? new URLSearchParams(dropEmpty(query)).toString() : "";
  return search ? `${hash}?${search}` : hash;
}

function dropEmpty(query) {
  return Object.fromEntries(Object.entries(query).filter(([, v]) => v !== "" && v !== null && v !== undefined));
}

export function navigate(href) {
  if (location.hash === href) window.dispatchEvent(new HashChangeEvent("hashchange"));
  else location.hash = href;
}

export const taskHref = (taskId) => routeHref("tasks", taskId);
export const lineageHref = (taskId) => routeHref("lineage", taskId);
export const sessionHref = (sessionId) => routeHref("sessions", sessionId);

/** Replace the query of the current route without adding a history entry. */
export function replaceQuery(query) {
  const [path] = location.hash.split("?");
  const search = new URLSearchParams(dropEmpty(query)).toString();
  history.replaceState(null, "", search ? `${path}?${search}` : path);
}

export function setTitle(text) {
  document.title = text ? `${text} · runyard Studio` : "runyard Studio";
}
