// Cron schedules: the list with each one's next run and last outcome, a form to make one,
// and a schedule's page with its trigger history. Trigger, pause, resume and delete act at
// once and the page redraws from the server's answer (every action needs the server token).

import { agent, itemsOf } from "../api.js";
import { errorBox, h, onActivate, replace, spinner, stateBadge } from "../dom.js";
import { timeElement } from "../times.js";
import { confirmAction, navigate, routeHref, setTitle, taskHref, toast } from "../ui.js";

const ROOT = "/schedules";
const POLICIES = ["forbid", "allow", "replace"];

export const scheduleHref = (name) => routeHref("schedules", name);
const schedulePath = (name, action) => `${ROOT}/${encodeURIComponent(name)}${action ? `/${action}` : ""}`;

function outcomeBadge(record) {
  if (!record) return h("span", { class: "muted" }, "never");
  const state = record.outcome === "submitted" ? "succeeded" : record.outcome === "skipped" ? "cancelled" : "failed";
  const badge = stateBadge(state);
  badge.textContent = record.outcome;
  return badge;
}

function field(id, label, input) {
  return h("div", { class: "field" }, h("label", { for: id }, label), input);
}

function createForm(onMade, message) {
  const name = h("input", { id: "schedule-name", type: "text", required: true, maxlength: "64", autocomplete: "off", placeholder: "nightly-report" });
  const task = h("input", { id: "schedule-task", type: "text", required: true, autocomplete: "off", placeholder: "demo" });
  const cron = h("input", { id: "schedule-cron", type: "text", required: true, autocomplete: "off", placeholder: "0 16 * * 1-5" });
  const zone = h("input", { id: "schedule-timezone", type: "text", value: "UTC", autocomplete: "off" });
  const args = h("input", { id: "schedule-arguments", type: "text", value: "{}", autocomplete: "off" });
  const policy = h("select", { id: "schedule-policy" }, ...POLICIES.map((p) => h("option", { value: p }, p)));
  const create = h("button", { type: "submit", class: "btn btn-primary", id: "schedule-create" }, "Create schedule");
  const form = h("form", { class: "inline-form", "aria-label": "New schedule" },
    field("schedule-name", "Name", name), field("schedule-task", "Task", task),
    field("schedule-cron", "Cron (5 fields)", cron), field("schedule-timezone", "Time zone", zone),
    field("schedule-arguments", "Arguments (JSON)", args), field("schedule-policy", "Policy", policy), create);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    let argumentsValue;
    try {
      argumentsValue = JSON.parse(args.value || "{}");
    } catch {
      replace(message, errorBox("Arguments must be a JSON object, such as {\"x\": 1}.", "Could not create the schedule."));
      return;
    }
    create.disabled = true;
    try {
      const made = await agent(ROOT, { method: "POST", json: {
        name: name.value.trim(), job: task.value.trim(), cron: cron.value.trim(),
        timezone: zone.value.trim() || "UTC", arguments: argumentsValue, concurrency_policy: policy.value,
      } });
      replace(message);
      toast(`Created ${made.name}`);
      onMade(made);
    } catch (error) {
      replace(message, errorBox(error.message, "Could not create the schedule."));
    } finally {
      create.disabled = false;
    }
  });
  return form;
}

async function act(name, action, done) {
  try {
    const answer = await agent(schedulePath(name, action), { method: "POST" });
    if (action === "trigger") toast(answer.outcome === "submitted" ? `Submitted ${answer.task_id}` : `${answer.outcome}: ${answer.reason}`,
      answer.outcome === "failed" ? "error" : "info");
    done();
  } catch (error) {
    toast(error.message, "error");
  }
}

function actions(schedule, done) {
  const button = (label, action, id) => h("button", { type: "button", class: "btn btn-small", "data-action": id,
    onclick: (event) => { event.stopPropagation(); act(schedule.name, action, done); } }, label);
  return h("div", { class: "actions" },
    button("Trigger now", "trigger", "trigger"),
    schedule.paused ? button("Resume", "resume", "resume") : button("Pause", "pause", "pause"));
}

function scheduleRow(schedule, reload) {
  const tr = h("tr", { tabindex: "0", class: "row-link", "data-schedule": schedule.name,
    "aria-label": `${schedule.name}, ${schedule.paused ? "paused" : "active"}` },
    h("td", {}, h("a", { href: scheduleHref(schedule.name), tabindex: "-1" }, schedule.name)),
    h("td", {}, h("code", {}, schedule.cron), " ", h("span", { class: "muted" }, schedule.timezone)),
    h("td", {}, schedule.task),
    h("td", { class: "col-opt nowrap", "data-field": "next" }, schedule.paused ? h("span", { class: "badge" }, "paused") : timeElement(schedule.next_run_at)),
    h("td", { class: "col-opt-2" }, schedule.concurrency_policy),
    h("td", { "data-field": "last" }, outcomeBadge(schedule.last_trigger)),
    h("td", {}, actions(schedule, reload)));
  onActivate(tr, () => navigate(scheduleHref(schedule.name)));
  return tr;
}

export function renderSchedules(main) {
  setTitle("Schedules");
  let alive = true;
  const tbody = h("tbody");
  const message = h("div");
  const load = async () => {
    try {
      const items = itemsOf(await agent(ROOT));
      if (!alive) return;
      replace(tbody, ...items.map((s) => scheduleRow(s, load)));
      if (!items.length) tbody.append(h("tr", {}, h("td", { colspan: 7, class: "empty" }, "No schedules yet.")));
    } catch (error) {
      if (!alive) return;
      replace(tbody);
      replace(message, errorBox(error.message, "Could not load the schedules."));
    }
  };
  main.append(
    h("div", { class: "page-head" }, h("h1", {}, "Schedules")),
    h("p", { class: "muted" }, "Cron schedules that submit task runs (",
      h("code", {}, "schedules:"), " in runyard.yaml, or made here)."),
    createForm(() => load(), message), message,
    h("div", { class: "table-wrap" },
      h("table", { class: "table", id: "schedules-table" },
        h("caption", { class: "visually-hidden" }, "Schedules"),
        h("thead", {}, h("tr", {},
          h("th", { scope: "col" }, "Name"), h("th", { scope: "col" }, "Cron"),
          h("th", { scope: "col" }, "Task"), h("th", { scope: "col", class: "col-opt" }, "Next run"),
          h("th", { scope: "col", class: "col-opt-2" }, "Policy"), h("th", { scope: "col" }, "Last"),
          h("th", { scope: "col" }, "Actions"))),
        tbody)));
  replace(tbody, h("tr", {}, h("td", { colspan: 7 }, spinner())));
  load();
  return () => {
    alive = false;
  };
}

function historyRow(record) {
  return h("tr", { "data-trigger": record.trigger_id },
    h("td", { class: "nowrap" }, timeElement(record.triggered_at)),
    h("td", {}, record.kind),
    h("td", {}, outcomeBadge(record)),
    h("td", {}, record.task_id ? h("a", { href: taskHref(record.task_id) }, record.task_id) : ""),
    h("td", { class: "col-opt" }, record.reason || record.error || ""));
}

export function renderSchedule(main, [name]) {
  setTitle(`Schedule ${name}`);
  let alive = true;
  const head = h("div", { class: "page-head" }, h("h1", {}, "Schedule"), h("code", { class: "task-id" }, name));
  const about = h("div", {}, spinner("Loading the schedule…"));
  const history = h("tbody");
  const load = async () => {
    try {
      const schedule = await agent(`${schedulePath(name)}?history_limit=200`);
      if (!alive) return;
      const remove = schedule.origin === "api" ? h("button", { type: "button", class: "btn btn-danger btn-small", id: "schedule-delete",
        onclick: async () => {
          if (!(await confirmAction({ title: `Delete ${name}?`, text: "Its history goes with it.", confirmLabel: "Delete" }))) return;
          try {
            await agent(schedulePath(name), { method: "DELETE" });
            navigate("#/schedules");
          } catch (error) {
            toast(error.message, "error");
          }
        } }, "Delete") : null;
      replace(about,
        h("p", {}, schedule.description),
        h("p", {}, h("code", {}, schedule.cron), ` in ${schedule.timezone}, runs `, h("strong", {}, schedule.task),
          `, ${schedule.concurrency_policy}, catch-up ${schedule.catch_up}. `,
          schedule.paused ? h("span", { class: "badge", id: "schedule-paused" }, "paused") : h("span", {}, "Next: ", timeElement(schedule.next_run_at))),
        h("div", { class: "actions" }, actions(schedule, load), remove));
      replace(history, ...[...schedule.history].reverse().map(historyRow));
      if (!schedule.history.length) history.append(h("tr", {}, h("td", { colspan: 5, class: "empty" }, "No triggers yet.")));
    } catch (error) {
      if (alive) replace(about, errorBox(error.message, "Could not load the schedule."));
    }
  };
  main.append(
    h("nav", { class: "crumbs", "aria-label": "Breadcrumb" },
      h("a", { href: "#/schedules" }, "Schedules"), " / ", h("span", { "aria-current": "page" }, name)),
    head, about,
    h("h2", {}, "History"),
    h("div", { class: "table-wrap" },
      h("table", { class: "table", id: "schedule-history" },
        h("caption", { class: "visually-hidden" }, "Trigger history, newest first"),
        h("thead", {}, h("tr", {},
          h("th", { scope: "col" }, "When"), h("th", { scope: "col" }, "Kind"), h("th", { scope: "col" }, "Outcome"),
          h("th", { scope: "col" }, "Task"), h("th", { scope: "col", class: "col-opt" }, "Reason"))),
        history)));
  load();
  return () => {
    alive = false;
  };
}
