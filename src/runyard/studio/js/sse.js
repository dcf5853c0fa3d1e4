// Server-Sent Events read with fetch() and a ReadableStream: EventSource can neither POST
// (the Job API streams over POST) nor send an Authorization header.

import { apiFetch, ApiError, errorMessage } from "./api.js";

/** An incremental SSE parser: feed() text as it arrives, onEvent({event, data, id}). */
export function createParser(onEvent) {
  let buffer = "";
  let data = [];
  let eventName = "";
  let lastId = null;

  const dispatch = () => {
    if (data.length) onEvent({ event: eventName || "message", data: data.join("\n"), id: lastId });
    data = [];
    eventName = "";
  };

  const line = (text) => {
    if (text === "") return dispatch();
    if (text.startsWith(":")) return undefined;
    const colon = text.indexOf(":");
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? "" : text.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") data.push(value);
    else if (field === "event") eventName = value;
    else if (field === "id" && !value.includes("\0")) lastId = value;
    return undefined;
  };

  return {
    feed(chunk) {
      let text = buffer + chunk;
      // a trailing CR may be the first half of CRLF: keep it for the next chunk
      const trailingCR = text.endsWith("\r");
      if (trailingCR) text = text.slice(0, -1);
      const lines = text.split(/\r\n|\r|\n/);
      buffer = lines.pop() + (trailingCR ? "\r" : "");
      lines.forEach(line);
    },
    end() {
      if (buffer) line(buffer.replace(/\r$/, ""));
      buffer = "";
      dispatch();
    },
    get lastId() {
      return lastId;
    },
  };
}

/** Read a response body as SSE until it ends; answers the last event id seen. */
export async function readEvents(response, onEvent, signal) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const parser = createParser(onEvent);
  const stop = () => reader.cancel().catch(() => {});
  signal?.addEventListener("abort", stop, { once: true });
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parser.feed(decoder.decode(value, { stream: true }));
    }
    parser.feed(decoder.decode());
    parser.end();
  } finally {
    signal?.removeEventListener("abort", stop);
  }
  return parser.lastId;
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const timer = setTimeout(resolve, ms);
  signal?.addEventListener("abort", () => {
    clearTimeout(timer);
    resolve();
  }, { once: true });
});

/**
 * Follow an SSE endpoint, reconnecting with Last-Event-ID after a dropped connection,
 * until ``isFinal(event)`` or ``shouldReconnect()`` says there is nothing more to follow.
 *
 * options: {method, body, lastEventId, signal, onEvent, isFinal, shouldReconnect}
 */
export async function follow(url, options) {
  const { method = "GET", body, signal, onEvent, isFinal = () => false } = options;
  const shouldReconnect = options.shouldReconnect || (async () => true);
  let lastId = options.lastEventId ?? null;
  let failures = 0;
  while (!signal?.aborted) {
    let finished = false;
    try {
      const headers = { Accept: "text/event-stream" };
      if (body !== undefined) headers["Content-Type"] = "application/json";
      if (lastId !== null) headers["Last-Event-ID"] = String(lastId);
      const response = await apiFetch(url, { method, body, headers, signal });
      if (!response.ok) {
        const text = await response.text();
        let parsed = text;
        try {
          parsed = JSON.parse(text);
        } catch {
          // not JSON
        }
        throw new ApiError(errorMessage(parsed, response.status), { status: response.status, detail: parsed });
      }
      failures = 0;
      lastId = await readEvents(response, (event) => {
        if (event.id !== null) lastId = event.id;
        onEvent(event);
        if (isFinal(event)) finished = true;
      }, signal) ?? lastId;
    } catch (error) {
      if (signal?.aborted) return;
      if (error instanceof ApiError && error.status >= 400) throw error;
      if (error?.name === "SignInCancelled") throw error;
      failures += 1;
    }
    if (finished || signal?.aborted) return;
    if (!(await shouldReconnect())) return;
    await sleep(Math.min(500 * 2 ** Math.min(failures, 4), 8000), signal);
  }
}

/** Parse an event's JSON data; text that is not JSON comes back as a string. */
export function eventData(event) {
  try {
    return JSON.parse(event.data);
  } catch {
    return event.data;
  }
}
