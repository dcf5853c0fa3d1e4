// The public APIs the Studio talks to: the Task Job API (/jobs) and the agent-run API
// (/api/v1). A 401 asks for the token and retries the request.

import { askToken, getToken } from "./auth.js";

export class ApiError extends Error {
  constructor(message, { status = 0, code = "", detail = null } = {}) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.detail = detail;
  }
}

/** fetch() with the bearer token; on 401 ask for a token and try again. */
export async function apiFetch(path, init = {}) {
  for (;;) {
    const headers = new Headers(init.headers || {});
    const token = getToken();
    if (token) headers.set("Authorization", `Bearer ${token}`);
    const response = await fetch(path, {
      ...init,
      headers,
      cache: "no-store",
      credentials: "same-origin",
      referrerPolicy: "no-referrer",
    });
    if (response.status !== 401) return response;
    await response.body?.cancel();
    await askToken(token ? "The token was refused. Enter a valid token." : "This server requires a token.");
  }
}

async function readBody(response) {
  const text = await response.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** A readable message from an error body: FastAPI ``detail`` or the agent API ``error``. */
export function errorMessage(body, status) {
  if (body && typeof body === "object") {
    if (body.error && typeof body.error === "object") {
      return body.error.message || body.error.code || `HTTP ${status}`;
    }
    if (Array.isArray(body.detail)) return body.detail.map(describeIssue).join("; ");
    if (body.detail !== undefined) return String(body.detail);
  }
  if (typeof body === "string" && body.trim()) return body.trim().slice(0, 500);
  return `HTTP ${status}`;
}

function describeIssue(issue) {
  const loc = issueField(issue);
  return loc ? `${loc}: ${issue.msg}` : String(issue.msg ?? issue);
}

/** The argument path of a 422 issue (``loc`` without ``body``/``arguments``). */
export function issueField(issue) {
  const loc = Array.isArray(issue?.loc) ? issue.loc.filter((p) => p !== "body" && p !== "arguments") : [];
  return loc.join(".");
}

async function raiseFor(response) {
  const body = await readBody(response);
  throw new ApiError(errorMessage(body, response.status), {
    status: response.status,
    code: body?.error?.code || "",
    detail: body?.detail ?? body?.error ?? body,
  });
}

/** POST /jobs/{name}; answers the JobResponse ``{answer, success, metadata}``. */
export async function job(name, args = {}, { signal } = {}) {
  const response = await apiFetch(`/jobs/${encodeURIComponent(name)}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify({ arguments: args }),
    signal,
  });
  if (!response.ok) await raiseFor(response);
  return response.json();
}

/** A job whose ``success: false`` is an error too; answers only the ``answer``. */
export async function jobAnswer(name, args = {}, options = {}) {
  const reply = await job(name, args, options);
  if (!reply.success) {
    const message = typeof reply.answer === "string" ? reply.answer : `${name} did not succeed`;
    throw new ApiError(message, { status: 200, detail: reply.answer });
  }
  return reply.answer;
}

/** GET /jobs: the job catalogue with each job's argument schema. */
export async function catalogue() {
  const response = await apiFetch("/jobs", { headers: { Accept: "application/json" } });
  if (!response.ok) await raiseFor(response);
  return (await response.json()).answer?.items || [];
}

/** A call to the agent-run API (/api/v1/...): JSON in, JSON out. */
export async function agent(path, { method = "GET", json, body, signal, headers } = {}) {
  const init = { method, signal, headers: { Accept: "application/json", ...(headers || {}) } };
  if (json !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(json);
  } else if (body !== undefined) {
    init.body = body;
  } else if (method !== "GET") {
    // a bodyless state change needs no type; declaring JSON is accepted as well
    init.headers["Content-Type"] = "application/json";
  }
  const response = await apiFetch(`/api/v1${path}`, init);
  if (!response.ok) await raiseFor(response);
  return response.status === 204 ? null : readBody(response);
}

/** The items of a list answer, whether it is ``{items: [...]}`` or a bare array. */
export function itemsOf(answer) {
  if (Array.isArray(answer)) return answer;
  if (answer && Array.isArray(answer.items)) return answer.items;
  return [];
}

/** GET a file with the token and answer its Response (for previews and downloads). */
export async function fetchFile(url, { signal, range } = {}) {
  const headers = {};
  if (range) headers.Range = `bytes=0-${range - 1}`;
  const response = await apiFetch(url, { signal, headers });
  if (!response.ok && response.status !== 206) await raiseFor(response);
  return response;
}

/** Path segments for a URL: each encoded, the slashes between them kept. */
export function encodePath(path) {
  return String(path).split("/").map(encodeURIComponent).join("/");
}

export const taskFileUrl = (taskId, path) =>
  `/api/v1/tasks/${encodeURIComponent(taskId)}/files/${encodePath(path)}`;
export const runFileUrl = (runId, path) =>
  `/api/v1/runs/${encodeURIComponent(runId)}/files/${encodePath(path)}`;
export const artifactUrl = (artifactId) =>
  `/api/v1/artifacts/${encodeURIComponent(artifactId)}/content`;

/** Upload one file to a session (multipart), reporting progress; answers the ArtifactRecord. */
export function uploadArtifact(sessionId, file, relativePath, onProgress) {
  const form = new FormData();
  form.append("sessionId", sessionId);
  form.append("relativePath", relativePath || file.name);
  form.append("file", file, file.name);
  return sendForm("/api/v1/artifacts/upload", form, onProgress);
}

async function sendForm(url, form, onProgress) {
  for (;;) {
    const token = getToken();
    const { status, body } = await xhrPost(url, form, token, onProgress);
    if (status === 401) {
      await askToken(token ? "The token was refused. Enter a valid token." : "This server requires a token.");
      continue;
    }
    if (status < 200 || status >= 300) {
      throw new ApiError(errorMessage(body, status), { status, code: body?.error?.code || "", detail: body });
    }
    return body;
  }
}

function xhrPost(url, form, token, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", url);
    xhr.setRequestHeader("Accept", "application/json");
    if (token) xhr.setRequestHeader("Authorization", `Bearer ${token}`);
    xhr.upload.addEventListener("progress", (event) => {
      if (onProgress && event.lengthComputable) onProgress(event.loaded, event.total);
    });
    xhr.addEventListener("load", () => {
      let body = xhr.responseText;
      try {
        body = JSON.parse(body);
      } catch {
        // keep the text
      }
      resolve({ status: xhr.status, body });
    });
    xhr.addEventListener("error", () => reject(new ApiError("Upload failed: network error")));
    xhr.addEventListener("abort", () => reject(new ApiError("Upload cancelled")));
    xhr.send(form);
  });
}
