// Agent sessions: the list (newest first, paged with nextCursor; each with its number of runs
// and its newest run's state) and creating a new one.

import { agent, ApiError, itemsOf } from "../api.js";
import { errorBox, h, onActivate, replace, spinner, stateBadge } from "../dom.js";
import { timeElement } from "../times.js";
import { navigate, sessionHref, setTitle } from "../ui.js";

const COLUMNS = 6;

export function agentUnavailable(error) {
  return error instanceof ApiError && (error.status === 404 || error.status === 405) && !error.code;
}

export function unavailableNotice() {
  return h("div", { class: "alert" }, h("strong", {}, "Agent runs are not enabled on this server."),
    " ", h("span", {}, "The agent-run API (/api/v1) did not answer; tasks still work."));
}

export function renderSessions(main) {
  setTitle("Sessions");
  let alive = true;
  const tbody = h("tbody");
  const more = h("button", { type: "button", class: "btn", hidden: true }, "Load more");
  const message = h("div");
  const title = h("input", { id: "session-title", type: "text", maxlength: "200", placeholder: "e.g. Sales forecast review", autocomplete: "off" });
  const create = h("button", { type: "submit", class: "btn btn-primary", id: "session-create" }, "New session");
  const form = h("form", { class: "inline-form", "aria-label": "New session" },
    h("div", { class: "field field-grow" }, h("label", { for: "session-title" }, "Title (optional)"), title), create);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    create.disabled = true;
    try {
      const session = await agent("/sessions", { method: "POST", json: title.value.trim() ? { title: title.value.trim() } : {} });
      navigate(sessionHref(session.id));
    } catch (error) {
      replace(message, agentUnavailable(error) ? unavailableNotice() : errorBox(error.message, "Could not create the session."));
    } finally {
      create.disabled = false;
    }
  });
  main.append(
    h("div", { class: "page-head" }, h("h1", {}, "Sessions")),
    h("p", { class: "muted" }, "A session keeps a conversation, its uploaded files and its agent runs together."),
    form, message,
    h("div", { class: "table-wrap" },
      h("table", { class: "table", id: "sessions-table" },
        h("caption", { class: "visually-hidden" }, "Sessions"),
        h("thead", {}, h("tr", {},
          h("th", { scope: "col" }, "Title"),
          h("th", { scope: "col" }, "Status"),
          h("th", { scope: "col", class: "num" }, "Runs"),
          h("th", { scope: "col" }, "Latest run"),
          h("th", { scope: "col", class: "col-opt" }, "Messages"),
          h("th", { scope: "col", class: "col-opt-2" }, "Updated"))),
        tbody)),
    h("div", { class: "pager" }, more));

  let cursor = null;
  const load = async () => {
    more.disabled = true;
    if (!cursor) replace(tbody, h("tr", {}, h("td", { colspan: COLUMNS }, spinner())));
    try {
      const query = cursor ? `?cursor=${encodeURIComponent(cursor)}` : "";
      const answer = await agent(`/sessions${query}`);
      if (!alive) return;
      if (!cursor) replace(tbody);
      const sessions = itemsOf(answer);
      tbody.append(...sessions.map(sessionRow));
      if (!tbody.children.length) tbody.append(h("tr", {}, h("td", { colspan: COLUMNS, class: "empty" }, "No sessions yet.")));
      cursor = answer?.nextCursor || null;
      more.hidden = !cursor;
    } catch (error) {
      if (!alive) return;
      replace(tbody);
      replace(message, agentUnavailable(error) ? unavailableNotice() : errorBox(error.message, "Could not load sessions."));
    } finally {
      more.disabled = false;
    }
  };
  more.addEventListener("click", load);
  load();
  return () => {
    alive = false;
  };
}

/** "3 runs", "1 run", "no runs"; and the newest run's state, for the row's label. */
function runsLabel(session) {
  const count = Number(session.runCount) || 0;
  const runs = count === 0 ? "no runs" : count === 1 ? "1 run" : `${count} runs`;
  return session.latestRunState ? `${runs}, latest ${session.latestRunState}` : runs;
}

function sessionRow(session) {
  const latest = session.latestRunState ? String(session.latestRunState).toLowerCase() : "";
  const tr = h("tr", { tabindex: "0", class: "row-link", "data-session-id": session.id,
    "aria-label": `${session.title || "Untitled session"}, ${session.status}, ${runsLabel(session)}` },
  h("td", {}, h("a", { href: sessionHref(session.id), tabindex: "-1" }, session.title || "Untitled session")),
  h("td", {}, stateBadge(String(session.status || "").toLowerCase())),
  h("td", { class: "num", "data-col": "runs" }, String(Number(session.runCount) || 0)),
  h("td", { "data-col": "latest-run" }, latest ? stateBadge(latest) : h("span", { class: "muted" }, "—")),
  h("td", { class: "col-opt num" }, String((session.history || []).length)),
  h("td", { class: "col-opt-2 nowrap" }, timeElement(session.updatedAt)));
  onActivate(tr, () => navigate(sessionHref(session.id)));
  return tr;
}
