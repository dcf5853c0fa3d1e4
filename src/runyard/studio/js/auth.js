// The access token: taken from the `#token=` link `runyard serve` prints, or asked for when
// the server answers 401; kept in sessionStorage (this tab only), sent only as an
// Authorization header — never in a URL.

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

export function forgetToken() {
  sessionStorage.removeItem(KEY);
  notify();
}

/**
 * Adopt the token of a `#token=<token>` link. A fragment never reaches a server; it is
 * also cleared from the address bar and this history entry at once (before any request),
 * so it is not left on screen, in bookmarks or in a copied address.
 */
export function adoptLinkToken() {
  const match = /^#token=([^&]*)$/.exec(location.hash);
  if (!match) return;
  history.replaceState(history.state, "", location.pathname + location.search);
  let token = match[1];
  try {
    token = decodeURIComponent(token);
  } catch {
    // keep it as given
  }
  if (token) setToken(token);
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
  document.getElementById("token-reason").textContent = reason;
  input.value = "";
  return new Promise((resolve, reject) => {
    const done = new AbortController();
    const finish = (token) => {
      done.abort();
      if (dialog.open) dialog.close();
      if (token) {
        setToken(token);
        resolve(token);
      } else {
        declined = true;
        notify();
        reject(new SignInCancelled());
      }
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const token = input.value.trim();
      if (token) finish(token);
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
