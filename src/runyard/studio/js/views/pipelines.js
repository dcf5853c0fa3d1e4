// Pipeline runs: the list (newest first) and one run with its steps drawn as a live graph
// (the lineage DAG: a node per step, an edge per dependency), refreshed while a step is
// unfinished. A run's steps can be cancelled from its page.

import { agent, itemsOf } from "../api.js";
import { errorBox, h, onActivate, replace, spinner, stateBadge } from "../dom.js";
import { timeElement } from "../times.js";
import { confirmAction, navigate, routeHref, setTitle, taskHref, toast } from "../ui.js";
import { lineageGraph } from "./lineage.js";

const REFRESH_MS = 1000;
const RUNS = "/pipelines/runs";

export const pipelineHref = (runId) => routeHref("pipelines", runId);

/** The run's steps as a graph get_task_graph would answer: nodes and dependency edges. */
export function stepsGraph(run) {
  const ids = new Map(run.steps.map((step) => [step.key, step.task_id]));
  const nodes = run.steps.map((step) => ({
    task_id: step.task_id, task_name: step.task, created_at: step.created_at,
    state: step.state === "missing" ? null : step.state, missing: step.state === "missing",
    provisional: false, parent_ids: step.depends_on.map((key) => ids.get(key)),
  }));
  const edges = run.steps.flatMap((step) => step.depends_on.map((key) => ({ from: ids.get(key), to: step.task_id })));
  return { nodes, edges, selected_id: null };
}

export function renderPipelines(main) {
  setTitle("Pipelines");
  let alive = true;
  const tbody = h("tbody");
  const message = h("div");
  main.append(
    h("div", { class: "page-head" }, h("h1", {}, "Pipelines")),
    h("p", { class: "muted" }, "Runs of pipelines written in Python (",
      h("code", {}, "runyard pipeline run FILE.py"), "), newest first."),
    message,
    h("div", { class: "table-wrap" },
      h("table", { class: "table", id: "pipelines-table" },
        h("caption", { class: "visually-hidden" }, "Pipeline runs"),
        h("thead", {}, h("tr", {},
          h("th", { scope: "col" }, "Run"),
          h("th", { scope: "col" }, "Pipeline"),
          h("th", { scope: "col" }, "State"),
          h("th", { scope: "col", class: "col-opt" }, "Steps"),
          h("th", { scope: "col", class: "col-opt-2" }, "Created"))),
        tbody)));
  replace(tbody, h("tr", {}, h("td", { colspan: 5 }, spinner())));
  agent(`${RUNS}?limit=200`).then((answer) => {
    if (!alive) return;
    const runs = itemsOf(answer);
    replace(tbody, ...runs.map(runRow));
    if (!runs.length) tbody.append(h("tr", {}, h("td", { colspan: 5, class: "empty" }, "No pipeline runs yet.")));
  }).catch((error) => {
    if (!alive) return;
    replace(tbody);
    replace(message, errorBox(error.message, "Could not load the pipeline runs."));
  });
  return () => {
    alive = false;
  };
}

function runRow(run) {
  const done = run.steps.filter((step) => step.state === "succeeded").length;
  const tr = h("tr", { tabindex: "0", class: "row-link", "data-run-id": run.id, "aria-label": `${run.id}, ${run.state}` },
    h("td", {}, h("a", { href: pipelineHref(run.id), tabindex: "-1" }, run.id)),
    h("td", {}, run.pipeline),
    h("td", {}, stateBadge(run.state)),
    h("td", { class: "col-opt num" }, `${done}/${run.steps.length}`),
    h("td", { class: "col-opt-2 nowrap" }, timeElement(run.created_at)));
  onActivate(tr, () => navigate(pipelineHref(run.id)));
  return tr;
}

export function renderPipeline(main, [runId]) {
  setTitle(`Pipeline run ${runId}`);
  let alive = true;
  let timer = null;
  const state = h("span", { id: "pipeline-state" });
  const cancel = h("button", { type: "button", class: "btn btn-danger", id: "pipeline-cancel", hidden: true }, "Cancel run");
  const graph = h("div", { id: "pipeline-graph" }, spinner("Loading the run…"));
  const steps = h("tbody");
  main.append(
    h("nav", { class: "crumbs", "aria-label": "Breadcrumb" },
      h("a", { href: "#/pipelines" }, "Pipelines"), " / ", h("span", { "aria-current": "page" }, runId)),
    h("div", { class: "page-head" }, h("h1", {}, "Pipeline run"), h("code", { class: "task-id" }, runId), state, cancel),
    graph,
    h("div", { class: "table-wrap" },
      h("table", { class: "table", id: "pipeline-steps" },
        h("caption", { class: "visually-hidden" }, "Steps"),
        h("thead", {}, h("tr", {},
          h("th", { scope: "col" }, "Step"), h("th", { scope: "col" }, "State"),
          h("th", { scope: "col" }, "Task"), h("th", { scope: "col", class: "col-opt" }, "After"))),
        steps)));
  const show = (run) => {
    replace(state, stateBadge(run.state));
    cancel.hidden = run.state !== "running";
    replace(graph, lineageGraph(stepsGraph(run), { label: `Steps of ${run.id}`, legend: false }));
    replace(steps, ...run.steps.map((step) => h("tr", { "data-step": step.key },
      h("td", {}, step.key), h("td", {}, stateBadge(step.state)),
      h("td", {}, h("a", { href: taskHref(step.task_id) }, step.task_id)),
      h("td", { class: "col-opt" }, step.depends_on.join(", ")))));
  };
  let shown = null;
  const load = async () => {
    try {
      const run = await agent(`${RUNS}/${encodeURIComponent(runId)}`);
      if (!alive) return;
      const seen = JSON.stringify([run.state, run.steps.map((step) => step.state)]);
      if (seen !== shown) show(run);  // redrawn only when a state moved: focus stays put
      shown = seen;
      if (run.state === "running") timer = setTimeout(load, REFRESH_MS);
    } catch (error) {
      if (alive) replace(graph, errorBox(error.message, "Could not load the pipeline run."));
    }
  };
  cancel.addEventListener("click", async () => {
    const sure = await confirmAction({ title: "Cancel this pipeline run?",
      text: "Its running steps are stopped and its waiting steps end cancelled.", confirmLabel: "Cancel run" });
    if (!sure) return;
    try {
      const run = await agent(`${RUNS}/${encodeURIComponent(runId)}/cancel`, { method: "POST" });
      toast(`Cancelled ${run.cancelled.length} step(s)`);
      clearTimeout(timer);
      load();
    } catch (error) {
      toast(error.message, "error");
    }
  });
  load();
  return () => {
    alive = false;
    clearTimeout(timer);
  };
}
