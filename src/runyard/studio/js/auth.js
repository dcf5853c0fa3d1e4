// The access token: asked for when the server answers 401, kept in sessionStorage (this tab
// only), sent only as an Authorization header — never in a URL.

const KEY = "runyard.token";
const listeners = new Set();
let pending = null;

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

function setToken(token) {
  sessionStorage.setItem(KEY, token);
  listeners.forEach((fn) => fn(token));
}

export function forgetToken() {
  sessionStorage.removeItem(KEY);
  listeners.forEach((fn) => fn(null));
}

export function onTokenChange(fn) {
  listeners.add(fn);
}

/** Show the sign-in dialog once, however many requests were refused at the same time. */
export function askToken(reason) {
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
