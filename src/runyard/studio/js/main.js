// The Studio shell: a hash router that mounts one view at a time into <main>.
// Each view is `render(container, params, query) -> cleanup` and owns its timers/streams.

import {
  adoptLinkToken, adoptLoginLink, askToken, forgetToken, getToken, onTokenChange, signInDeclined,
} from "./auth.js";
import { errorBox, h, replace } from "./dom.js";
import { watchStorage } from "./storage.js";
import { setTitle } from "./ui.js";
import { renderTasks } from "./views/tasks.js";
import { renderTask } from "./views/task.js";
import { renderLineagePage } from "./views/lineage.js";
import { renderCompare } from "./views/compare.js";
import { renderSubmit } from "./views/submit.js";
import { renderSessions } from "./views/sessions.js";
import { renderSession } from "./views/session.js";
import { renderPipeline, renderPipelines } from "./views/pipelines.js";
import { renderSchedule, renderSchedules } from "./views/schedules.js";
import { addPageLinks, renderStudioPage } from "./views/studiopage.js";

const ROUTES = [
  { pattern: /^\/?$/, nav: "tasks", view: renderTasks },
  { pattern: /^\/tasks$/, nav: "tasks", view: renderTasks },
  { pattern: /^\/tasks\/([^/]+)$/, nav: "tasks", view: renderTask },
  { pattern: /^\/lineage\/([^/]+)$/, nav: "tasks", view: renderLineagePage },
  { pattern: /^\/compare$/, nav: "tasks", view: renderCompare },
  { pattern: /^\/submit$/, nav: "submit", view: renderSubmit },
  { pattern: /^\/sessions$/, nav: "sessions", view: renderSessions },
  { pattern: /^\/sessions\/([^/]+)$/, nav: "sessions", view: renderSession },
  { pattern: /^\/pipelines$/, nav: "pipelines", view: renderPipelines },
  { pattern: /^\/pipelines\/([^/]+)$/, nav: "pipelines", view: renderPipeline },
  { pattern: /^\/schedules$/, nav: "schedules", view: renderSchedules },
  { pattern: /^\/schedules\/([^/]+)$/, nav: "schedules", view: renderSchedule },
  { pattern: /^\/pages\/([a-z][a-z0-9_-]*)$/, nav: "page", view: renderStudioPage },
];

let cleanup = null;
let lastPath = null;

function parseHash() {
  const raw = location.hash.replace(/^#/, "");
  const [path, search = ""] = raw.split("?");
  return { path, query: new URLSearchParams(search) };
}

function route() {
  const { path, query } = parseHash();
  const main = document.getElementById("main");
  const match = ROUTES.map((r) => ({ r, m: r.pattern.exec(path) })).find((x) => x.m);
  if (typeof cleanup === "function") cleanup();
  cleanup = null;
  markNav(match?.r.nav === "page" ? `page:${match.m[1]}` : match?.r.nav);
  if (!match) {
    setTitle("Not found");
    replace(main, h("h1", {}, "Page not found"),
      h("p", {}, "There is no Studio page at this address. ", h("a", { href: "#/tasks" }, "Go to the task list.")));
    return;
  }
  const params = match.m.slice(1).map((p) => {
    try {
      return decodeURIComponent(p);
    } catch {
      return p;
    }
  });
  replace(main);
  try {
    cleanup = match.r.view(main, params, query);
  } catch (error) {
    replace(main, errorBox(error.message || String(error)));
  }
  if (path !== lastPath) {
    window.scrollTo(0, 0);
    if (lastPath !== null) main.focus({ preventScroll: true });
  }
  lastPath = path;
}

/** The navigation entry of the current address (a page link appears after the route). */
function currentNav() {
  const { path } = parseHash();
  const page = /^\/pages\/([a-z][a-z0-9_-]*)$/.exec(path);
  return page ? `page:${page[1]}` : ROUTES.find((r) => r.pattern.test(path))?.nav;
}

function markNav(active) {
  for (const link of document.querySelectorAll("[data-nav]")) {
    if (link.dataset.nav === active) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function syncTokenButtons() {
  document.getElementById("forget-token").hidden = !getToken();
  document.getElementById("sign-in").hidden = !signInDeclined();
}

/** The page a login link that failed leaves: what happened and how to get a new link. */
function showFailedLogin({ expired, message }) {
  setTitle("Sign-in link expired");
  const main = document.getElementById("main");
  const title = expired ? "This sign-in link has expired or was already used." : "Sign-in failed.";
  replace(main,
    h("div", { class: "alert alert-error", role: "alert", id: "login-failed" },
      h("strong", {}, title), " ",
      h("span", { class: "alert-text" }, expired
        ? "A link signs in once, within a few minutes. Run "
        : `${message} Run `,
      h("code", {}, "runyard studio"), " on the server's machine for a new one.")),
    h("p", {}, "Or ", h("a", { href: "#/tasks" }, "sign in with the access token"), "."));
}

async function start() {
  // first: before any other request, and before the router reads the hash (each link
  // leaves the address before its own request)
  await adoptLinkToken();
  const login = await adoptLoginLink();
  const forget = document.getElementById("forget-token");
  forget.addEventListener("click", () => {
    forgetToken();
    route();
  });
  document.getElementById("skip-link").addEventListener("click", (event) => {
    event.preventDefault();
    document.getElementById("main").focus();
  });
  document.getElementById("sign-in").addEventListener("click", () => {
    askToken("Enter the access token of this server.", { force: true }).then(route, () => {});
  });
  onTokenChange(syncTokenButtons);
  syncTokenButtons();
  window.addEventListener("hashchange", route);
  const loginFailed = login && !login.ok && !getToken();
  if (loginFailed) showFailedLogin(login);
  else route();
  onTokenChange(() => addPageLinks().then(() => markNav(currentNav())));
  // a failed link's page asks for nothing: the pages are listed once the tab signs in
  if (!loginFailed) addPageLinks().then(() => markNav(currentNav()));
  watchStorage();
}

start();
