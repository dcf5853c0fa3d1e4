// Operations pages (studio.pages in runyard.yaml, AxonX's shape, from list_studio_pages):
// one navigation entry each, at #/pages/<id>, showing its title over the view it names.
// runyard has no task categories: a tasks or pipeline page shows every task or pipeline
// run; a schedules page shows the schedules it lists (all of them when it lists none).
// A link is only ever built from a page id that is a lowercase slug, never from a URL.

import { agent, itemsOf, jobAnswer } from "../api.js";
import { errorBox, h, replace, spinner } from "../dom.js";
import { routeHref, setTitle } from "../ui.js";
import { renderPipelines } from "./pipelines.js";
import { renderSchedules, scheduleHref } from "./schedules.js";
import { renderTasks } from "./tasks.js";

export const PAGE_ID = /^[a-z][a-z0-9_-]*$/;
const VIEWS = { tasks: renderTasks, pipeline: renderPipelines, schedules: renderSchedules };
let pages = null;

/** The configured pages (asked once; asked again after a failure). */
export function studioPages() {
  pages ??= jobAnswer("list_studio_pages").then(
    (answer) => (Array.isArray(answer) ? answer.filter((p) => PAGE_ID.test(p?.id) && VIEWS[p.view]) : []),
    (error) => {
      pages = null;
      throw error;
    });
  return pages;
}

const titleOf = (page) => String(page.title?.en || page.id);

/** One navigation entry per page, before the API link; none when the list cannot be read. */
export async function addPageLinks() {
  let listed;
  try {
    listed = await studioPages();
  } catch {
    return;
  }
  const nav = document.querySelector("nav .nav");
  if (!nav || nav.querySelector("[data-studio-page]")) return;
  const api = nav.querySelector('a[href="/docs"]')?.closest("li") || null;
  for (const page of listed) {
    const link = h("a", { href: routeHref("pages", page.id), "data-nav": `page:${page.id}`, lang: "en" }, titleOf(page));
    nav.insertBefore(h("li", { "data-studio-page": page.id }, link), api);
  }
}

export function renderStudioPage(main, [id], query) {
  let cleanup = null;
  let alive = true;
  const body = h("div");
  main.append(body);
  replace(body, spinner());
  studioPages().then((listed) => {
    if (!alive) return;
    const page = listed.find((p) => p.id === id);
    replace(body);
    if (!page) {
      setTitle("Not found");
      replace(body, h("h1", {}, "Page not found"),
        h("p", {}, `No page ${JSON.stringify(id)} in studio.pages. `, h("a", { href: "#/tasks" }, "Go to the task list.")));
      return;
    }
    cleanup = showPage(body, page, query);
  }, (error) => {
    if (alive) replace(body, errorBox(error.message || String(error), "Could not load the Studio pages."));
  });
  return () => {
    alive = false;
    if (typeof cleanup === "function") cleanup();
  };
}

function showPage(body, page, query) {
  const view = h("div", { class: "studio-page-view" });
  const note = page.category ? `Category ${page.category}: runyard lists every ${page.view === "tasks" ? "task" : "pipeline run"}.` : "";
  body.append(
    h("div", { class: "page-head" }, h("h1", { id: "studio-page-title", lang: "en" }, titleOf(page))),
    note ? h("p", { class: "muted" }, note) : null,
    view);
  const cleanup = page.view === "schedules" && page.schedules?.length
    ? listedSchedules(view, page.schedules)
    : VIEWS[page.view](view, [], query);
  for (const heading of view.querySelectorAll(".page-head h1")) heading.replaceWith(h("h2", {}, heading.textContent));
  setTitle(titleOf(page));
  return cleanup;
}

function listedSchedules(view, names) {
  let alive = true;
  const list = h("ul", { id: "studio-page-schedules" });
  view.append(h("h2", {}, "Schedules"), list);
  agent("/schedules").then((answer) => {
    if (!alive) return;
    const known = new Map(itemsOf(answer).map((s) => [s.name, s]));
    replace(list, ...names.map((name) => h("li", {},
      known.has(name) ? h("a", { href: scheduleHref(name) }, name) : h("span", {}, name),
      known.has(name) ? h("span", { class: "muted" }, ` ${known.get(name).cron}`) : h("span", { class: "muted" }, " (no such schedule)"))));
  }, (error) => {
    if (alive) replace(list, h("li", {}, errorBox(error.message || String(error), "Could not load the schedules.")));
  });
  return () => {
    alive = false;
  };
}
