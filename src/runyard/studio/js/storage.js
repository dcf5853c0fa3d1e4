// The server's disk, as /health reports it: a banner while new work is refused for lack of
// space (below min_free_mb) or while finished runs wait for their records to be written.

import { h, replace } from "./dom.js";

const EVERY_MS = 30000;

/** The banner text for a /health storage report, or "" when all is well. */
export function storageMessage(storage) {
  if (!storage) return "";
  const parts = [];
  if (storage.low) {
    parts.push(
      `The server's disk is nearly full: ${storage.free_mb} MB free, below the ` +
        `${storage.min_free_mb} MB it keeps. New tasks, sessions, uploads and runs are refused ` +
        "until space is freed.",
    );
  }
  if (storage.unwritten > 0) {
    const runs = storage.unwritten === 1 ? "1 finished run is" : `${storage.unwritten} finished runs are`;
    parts.push(`${runs} waiting for disk space to write their records; what is shown is kept in memory.`);
  }
  return parts.join(" ");
}

async function check(banner) {
  let storage = null;
  try {
    const response = await fetch("health", { cache: "no-store", referrerPolicy: "no-referrer" });
    if (response.ok) storage = (await response.json()).answer?.storage;
  } catch {
    return; // the server is unreachable: the views say so themselves
  }
  const message = storageMessage(storage);
  banner.hidden = !message;
  replace(banner, ...(message ? [h("strong", {}, "Low disk space. "), message] : []));
}

/** Show and refresh the storage banner (#storage-banner) for the life of the page. */
export function watchStorage() {
  const banner = document.getElementById("storage-banner");
  if (!banner) return;
  check(banner);
  setInterval(() => check(banner), EVERY_MS);
}
