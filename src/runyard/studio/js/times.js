// Times as the Studio shows them everywhere: relative ("3 min ago") in the page, with the
// absolute local time and its zone on hover (the `title`), and the ISO instant in
// `datetime`. Relative texts are refreshed by one timer for the whole page, every second: a
// recent time counts in seconds ("Started 7 s ago"), and it ticks as a duration beside it does.

import { h } from "./dom.js";
import { formatTime, parseTime } from "./format.js";

const REFRESH_MS = 1000;
const UNITS = [
  [60, "s"], [60, "min"], [24, "h"], [30, "d"], [12, "mo"], [Infinity, "y"],
];

/** "just now", "42 s ago", "3 min ago", "5 h ago", "2 d ago", "in 3 min"; "—" without a time. */
export function relativeTime(iso, now = Date.now()) {
  const ms = parseTime(iso);
  if (ms === null) return "—";
  const seconds = Math.round((now - ms) / 1000);
  const size = Math.abs(seconds);
  if (size < 5) return "just now";
  let value = size;
  for (const [step, unit] of UNITS) {
    if (value < step) return seconds >= 0 ? `${value} ${unit} ago` : `in ${value} ${unit}`;
    value = Math.floor(value / step);
  }
  return "—";
}

/** The zone this browser shows times in: "UTC+02:00 (Europe/Paris)". */
export function zoneLabel(iso) {
  const ms = parseTime(iso) ?? Date.now();
  const minutes = -new Date(ms).getTimezoneOffset();
  const sign = minutes < 0 ? "-" : "+";
  const pad = (n) => String(Math.floor(Math.abs(n))).padStart(2, "0");
  const offset = `UTC${sign}${pad(minutes / 60)}:${pad(minutes % 60)}`;
  const name = Intl.DateTimeFormat().resolvedOptions().timeZone;
  return name ? `${offset} (${name})` : offset;
}

/** "2026-01-01 10:00:05 UTC+01:00 (Europe/Paris)": the full local time with its zone. */
export function absoluteTime(iso) {
  return parseTime(iso) === null ? "" : `${formatTime(iso)} ${zoneLabel(iso)}`;
}

/** A <time> element: relative text, absolute time and zone in its title, kept fresh. */
export function timeElement(iso, { className = "" } = {}) {
  if (parseTime(iso) === null) return h("span", { class: "muted" }, "—");
  return h("time", { datetime: iso, title: absoluteTime(iso), class: className || null, "data-relative": "" },
    relativeTime(iso));
}

/** Refresh every relative time in the page; only texts that changed are written. */
export function refreshAll(now = Date.now()) {
  for (const el of document.querySelectorAll("time[data-relative]")) {
    const text = relativeTime(el.getAttribute("datetime"), now);
    if (el.textContent !== text) el.textContent = text;
  }
}

if (typeof document !== "undefined") setInterval(refreshAll, REFRESH_MS);
