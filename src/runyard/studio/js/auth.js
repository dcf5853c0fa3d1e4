// Signing in. The Studio holds a browser session token, never the server's own token: it
// trades the one-time code of a login link (`#login=<code>`, printed by `runyard serve` and
// `runyard studio`) for one (POST /api/v1/login), and so does a token typed into the sign-in
// dialog or given by an old `#token=` link (first minting a code with it). The session token
// is kept in sessionStorage (this tab only), sent only as an Authorization header — never in
// a URL. Browsers write both to the profile's disk (history, session restore, favicons, the
// Session Storage folder): what they keep is a spent code and a token that ends with the
// server process, its session lifetime or "Forget token".

const KEY = "runyard.token";
const listeners = new Set();
let pending = null;
let declined = false; // the prompt was cancelled: background requests do not reopen it

export class SignInCancelled extends Error {
  constructor() {
    super("Sign-in was cancelled; this server requires a token.");
    this.name = "SignInCancelled";
    this.status = 401;
  }
}

export function getToken() {
  try {
    return sessionStorage.getItem(KEY);
  } catch {
    return null;
  }
}

const notify = () => listeners.forEach((fn) => fn());

function setToken(token) {
  sessionStorage.setItem(KEY, token);
  declined = false;
  notify();
}

/** Sign out: the server ends the session (best effort), the tab forgets its token. */
export function forgetToken() {
  const token = getToken();
  sessionStorage.removeItem(KEY);
  notify();
  if (token) postJson("/api/v1/logout", {}, token).catch(() => {});
}

function postJson(path, body, token = null) {
  const headers = { "Content-Type": "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  return fetch(path, {
    method: "POST",
    headers,
    body: JSON.stringify(body),
    cache: "no-store",
    credentials: "same-origin",
    referrerPolicy: "no-referrer",
  });
}

/** Trade a login code for a session token: `{ ok, status, message }`. */
async function redeem(code) {
  let response;
  try {
    response = await postJson("/api/v1/login", { code });
  } catch (error) {
    return { ok: false, status: 0, message: `The server did not answer (${error.message}).` };
  }
  const body = await response.json().catch(() => ({}));
  if (response.ok) {
    if (body.token) setToken(body.token);
    return { ok: true, status: response.status };
  }
  const message = typeof body.detail === "string" ? body.detail : `HTTP ${response.status}`;
  return { ok: false, status: response.status, message };
}

/** Trade the server token for a session token (a code minted with it, then redeemed). */
async function signInWith(serverToken) {
  let response;
  try {
    response = await postJson("/api/v1/login/codes", {}, serverToken);
  } catch (error) {
    return { ok: false, status: 0, message: `The server did not answer (${error.message}).` };
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) return { ok: false, status: response.status, message: `HTTP ${response.status}` };
  return body.code ? redeem(body.code) : { ok: true, status: response.status };
}

/**
 * Sign in by a login link: the code is cleared from the address bar and this history entry
 * at once (before any request), then traded for a session token (valid once). A link with
 * `&to=<route>` (printed by commands that name a page) leaves the tab on that page.
 * Answers null when the address holds no login link, else `{ ok, status, message }`.
 */
export async function adoptLoginLink() {
  const match = /^#login=([^&]*)(?:&to=([^&]*))?$/.exec(location.hash);
  if (!match) return null;
  // `to`: the Studio page the link leads to, as its route is written (`/tasks/<id>`, the id
  // encoded); only ever a route of this page
  const to = match[2] ?? "";
  const page = /^\/[a-z]/.test(to) ? `#${to}` : "";
  history.replaceState(history.state, "", location.pathname + location.search + page);
  return redeem(decoded(match[1]));
}

/**
 * Sign in by a `#token=<token>` link (no runyard prints one any more; links made earlier
 * keep working). The browser recorded the address before any script ran, so refusing it
 * would undo nothing; it is cleared from the address bar and this history entry at once,
 * so it is not left on screen, in bookmarks or in a copied address, and the token is
 * traded for a session token rather than kept. A login link is the one that leaves no
 * token behind.
 */
export async function adoptLinkToken() {
  const match = /^#token=([^&]*)$/.exec(location.hash);
  if (!match) return;
  history.replaceState(history.state, "", location.pathname + location.search);
  const token = decoded(match[1]);
  if (token) await signInWith(token);
}

function decoded(text) {
  try {
    return decodeURIComponent(text);
  } catch {
    return text; // keep it as given
  }
}

/** True once the user cancelled the prompt, until they ask to sign in again. */
export function signInDeclined() {
  return declined;
}

export function onTokenChange(fn) {
  listeners.add(fn);
}

/** Show the sign-in dialog once, however many requests were refused at the same time. */
export function askToken(reason, { force = false } = {}) {
  if (force) declined = false;
  if (declined) return Promise.reject(new SignInCancelled());
  if (!pending) {
    pending = promptForToken(reason).finally(() => {
      pending = null;
    });
  }
  return pending;
}

function promptForToken(reason) {
  const dialog = document.getElementById("token-dialog");
  const form = document.getElementById("token-form");
  const input = document.getElementById("token-input");
  const cancel = document.getElementById("token-cancel");
  const said = document.getElementById("token-reason");
  said.textContent = reason;
  input.value = "";
  return new Promise((resolve, reject) => {
    const done = new AbortController();
    const finish = (token) => {
      done.abort();
      if (dialog.open) dialog.close();
      if (token) {
        resolve(token);
      } else {
        declined = true;
        notify();
        reject(new SignInCancelled());
      }
    };
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const token = input.value.trim();
      if (!token) return;
      const outcome = await signInWith(token);
      if (outcome.ok) {
        finish(getToken() || token);
      } else {
        said.textContent = outcome.status === 401 || outcome.status === 403
          ? "The token was refused. Enter a valid token."
          : `Sign-in failed: ${outcome.message}`;
        input.select();
      }
    }, { signal: done.signal });
    cancel.addEventListener("click", () => finish(null), { signal: done.signal });
    dialog.addEventListener("cancel", (event) => {
      event.preventDefault();
      finish(null);
    }, { signal: done.signal });
    dialog.showModal();
    input.focus();
  });
}
