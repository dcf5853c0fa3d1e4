// Formatting of sizes, times and durations for display.

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

export function formatBytes(bytes) {
  if (typeof bytes !== "number" || !Number.isFinite(bytes)) return "—";
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(value < 10 ? 1 : 0)} ${UNITS[unit]}`;
}

export function parseTime(iso) {
  if (!iso) return null;
  const ms = Date.parse(iso);
  return Number.isNaN(ms) ? null : ms;
}

const pad = (n) => String(n).padStart(2, "0");

/** Local time as YYYY-MM-DD HH:MM:SS (the ISO original belongs in a title). */
export function formatTime(iso) {
  const ms = parseTime(iso);
  if (ms === null) return "—";
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function formatDuration(ms) {
  if (ms === null || ms === undefined || ms < 0) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
  const hours = Math.floor(m / 60);
  if (hours < 48) return `${hours} h ${m % 60} min`;
  return `${Math.floor(hours / 24)} d ${hours % 24} h`;
}

/** How long a task or run took, or has been going for (``now`` when still active). */
export function elapsed(startIso, endIso, now = Date.now()) {
  const start = parseTime(startIso);
  if (start === null) return null;
  const end = parseTime(endIso) ?? now;
  return end - start;
}

export function pluralise(count, word, plural = `${word}s`) {
  return `${count} ${count === 1 ? word : plural}`;
}

/** The instance name of a task id (its third part). */
export function instanceName(taskId) {
  const parts = String(taskId || "").split("#");
  return parts.length >= 3 ? parts.slice(2).join("#") : String(taskId || "");
}

export function shortHash(sha) {
  return sha ? `${sha.slice(0, 12)}…` : "—";
}

export function jsonText(value) {
  return JSON.stringify(value, null, 2);
}
