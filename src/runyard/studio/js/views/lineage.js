// Lineage: get_task_graph drawn as a left-to-right DAG in SVG. Missing and provisional nodes
// are marked (a provisional node has no metadata yet: it has not succeeded, so its links are
// the ones it was submitted with, "planned", not yet published); a node opens its task on click, Enter or Space; arrow keys move between nodes.

import { jobAnswer } from "../api.js";
import { errorBox, h, onActivate, replace, spinner } from "../dom.js";
import { layoutDag } from "../dag.js";
import { instanceName } from "../format.js";
import { navigate, setTitle, taskHref } from "../ui.js";

const NODE_W = 210;
const NODE_H = 74;
const PAD = 16;
const PLANNED = "links planned";

function truncate(text, max) {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function nodeStatus(node) {
  if (node.missing) return "missing";
  if (node.provisional) return `${node.state || "unknown"} · ${PLANNED}`;
  return node.state || "unknown";
}

/** The graph as a figure: an SVG plus a legend. `onOpen(taskId)` opens a node. */
export function lineageGraph(graph, { onOpen = (id) => navigate(taskHref(id)), label = "Lineage graph", legend = true } = {}) {
  const nodes = graph.nodes || [];
  const byId = new Map(nodes.map((n) => [n.task_id, n]));
  const edges = (graph.edges || []).map((e) => ({ from: e.from ?? e.source, to: e.to ?? e.target }))
    .filter((e) => byId.has(e.from) && byId.has(e.to));
  const layout = layoutDag(nodes.map((n) => n.task_id), edges, {
    nodeWidth: NODE_W, nodeHeight: NODE_H, sortKey: (id) => `${byId.get(id)?.created_at || ""}\u0000${id}`,
  });
  const width = layout.width + PAD * 2;
  const height = layout.height + PAD * 2;
  const svg = h("svg:svg", {
    class: "dag", viewBox: `0 0 ${width} ${height}`, width, height, role: "group", "aria-label": label,
  });
  svg.append(arrowMarker());
  const edgeLayer = h("svg:g", { class: "dag-edges", "aria-hidden": "true" });
  for (const route of layout.routes) {
    const a = layout.positions.get(route.from);
    const b = layout.positions.get(route.to);
    edgeLayer.append(edgePath(a, route.via, b, byId.get(route.from)?.missing || byId.get(route.to)?.missing));
  }
  svg.append(edgeLayer);
  const nodeElements = [];
  for (const layer of layout.layers) {
    for (const id of layer) {
      const el = nodeElement(byId.get(id), layout.positions.get(id), graph.selected_id, onOpen);
      nodeElements.push(el);
      svg.append(el);
    }
  }
  arrowKeys(nodeElements, layout);
  return h("figure", { class: "lineage" },
    h("div", { class: "dag-scroll", tabindex: "-1" }, svg),
    h("figcaption", { class: "legend" },
      // a pipeline run's steps have neither a selected node nor planned links
      legend ? legendItem("selected", "selected task") : null,
      legend ? legendItem("provisional", `${PLANNED}: not published yet (the task has not succeeded)`) : null,
      legendItem("missing", "missing (referenced, absent)"),
      h("span", { class: "muted small" }, `${nodes.length} ${nodes.length === 1 ? "task" : "tasks"}, ${edges.length} ${edges.length === 1 ? "link" : "links"}`)));
}

function legendItem(kind, text) {
  return h("span", { class: `legend-item legend-${kind}` }, h("span", { class: "legend-swatch", "aria-hidden": "true" }), text);
}

function arrowMarker() {
  return h("svg:defs", {},
    h("svg:marker", { id: "dag-arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "8", markerHeight: "8", orient: "auto-start-reverse" },
      h("svg:path", { d: "M 0 0 L 10 5 L 0 10 z", class: "dag-arrow" })));
}

// From the source's right side through each virtual slot (straight across it) to the
// target's left side, with a smooth curve between layers.
function edgePath(a, via, b, missing) {
  const mid = PAD + NODE_H / 2;
  let d = `M ${a.x + PAD + NODE_W} ${a.y + mid}`;
  let x = a.x + PAD + NODE_W;
  let y = a.y + mid;
  const curveTo = (x2, y2) => {
    const bend = Math.max(24, (x2 - x) / 2);
    d += ` C ${x + bend} ${y}, ${x2 - bend} ${y2}, ${x2} ${y2}`;
    x = x2;
    y = y2;
  };
  for (const slot of via) {
    curveTo(slot.x + PAD, slot.y + mid);
    x = slot.x + PAD + NODE_W;
    d += ` L ${x} ${y}`;
  }
  curveTo(b.x + PAD, b.y + mid);
  return h("svg:path", {
    class: missing ? "dag-edge dag-edge-missing" : "dag-edge",
    d,
    "marker-end": "url(#dag-arrow)",
  });
}

function nodeElement(node, pos, selectedId, onOpen) {
  const classes = ["dag-node", `state-${node.missing ? "missing" : node.state || "unknown"}`];
  if (node.missing) classes.push("is-missing");
  if (node.provisional) classes.push("is-provisional");
  if (node.task_id === selectedId) classes.push("is-selected");
  const status = nodeStatus(node);
  const name = instanceName(node.task_id);
  const registered = node.task_name || node.task_id.split("#")[1] || "";
  const g = h("svg:g", {
    class: classes.join(" "),
    transform: `translate(${pos.x + PAD} ${pos.y + PAD})`,
    tabindex: "0",
    role: node.missing ? "img" : "link",
    "aria-label": `${node.task_id}, ${status}${node.task_id === selectedId ? ", selected" : ""}`,
    "data-task-id": node.task_id,
    "aria-disabled": node.missing ? "true" : null,
  },
  h("svg:title", {}, `${node.task_id}\n${status}`),
  h("svg:rect", { class: "dag-box", width: NODE_W, height: NODE_H, rx: 8 }),
  h("svg:rect", { class: "dag-stripe", width: 6, height: NODE_H, rx: 3 }),
  h("svg:text", { class: "dag-name", x: 16, y: 23 }, truncate(name, 24)),
  h("svg:text", { class: "dag-meta", x: 16, y: 43 }, truncate(registered, 30)),
  // the status line is never cut: its longest form ("cancelled · links planned") fits
  h("svg:text", { class: "dag-meta dag-status", x: 16, y: 62 }, status));
  if (!node.missing) onActivate(g, () => onOpen(node.task_id));
  return g;
}

// Up/Down move within a layer, Left/Right to the nearest node of the neighbouring layer.
function arrowKeys(elements, layout) {
  const byId = new Map(elements.map((el) => [el.dataset.taskId, el]));
  const focus = (id) => id && byId.get(id)?.focus();
  for (const el of elements) {
    el.addEventListener("keydown", (event) => {
      const pos = layout.positions.get(el.dataset.taskId);
      const layer = layout.layers[pos.layer];
      const target = {
        ArrowUp: () => layer[pos.order - 1],
        ArrowDown: () => layer[pos.order + 1],
        ArrowLeft: () => nearest(layout, pos.layer - 1, pos.y),
        ArrowRight: () => nearest(layout, pos.layer + 1, pos.y),
      }[event.key];
      if (!target) return;
      event.preventDefault();
      focus(target());
    });
  }
}

function nearest(layout, layerIndex, y) {
  const layer = layout.layers[layerIndex];
  if (!layer) return null;
  return layer.reduce((best, id) => {
    const dy = Math.abs(layout.positions.get(id).y - y);
    return !best || dy < best.dy ? { id, dy } : best;
  }, null)?.id;
}

/** The lineage page: the graph of one task, full width. */
export function renderLineagePage(main, [taskId]) {
  setTitle(`Lineage of ${instanceName(taskId)}`);
  const body = h("div", {}, spinner("Loading lineage…"));
  main.append(
    h("nav", { class: "crumbs", "aria-label": "Breadcrumb" },
      h("a", { href: "#/tasks" }, "Tasks"), " / ",
      h("a", { href: taskHref(taskId) }, instanceName(taskId)), " / ", h("span", { "aria-current": "page" }, "Lineage")),
    h("div", { class: "page-head" }, h("h1", {}, "Lineage"), h("code", { class: "task-id" }, taskId)),
    h("p", { class: "muted" }, "Upstream tasks on the left, downstream on the right. Open a task with a click or Enter; arrow keys move between tasks."),
    body);
  let alive = true;
  jobAnswer("get_task_graph", { task_id: taskId }).then((graph) => {
    if (alive) replace(body, lineageGraph(graph, { label: `Lineage of ${taskId}` }));
  }).catch((error) => {
    if (alive) replace(body, errorBox(error.message, "Could not load the lineage."));
  });
  return () => {
    alive = false;
  };
}
