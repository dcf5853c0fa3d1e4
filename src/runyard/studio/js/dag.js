// Left-to-right layered layout of a small DAG (Sugiyama style): longest-path layering, a
// virtual node in every layer a long edge crosses, barycenter ordering sweeps to reduce
// crossings, then coordinates. Edges come back as routes through their virtual nodes so no
// edge is drawn under a node. Pure: ids in, coordinates out.

/**
 * layoutDag(["a", "b"], [{from: "a", to: "b"}], {nodeWidth, nodeHeight, gapX, gapY, sortKey})
 * -> {positions: Map(id -> {x, y, layer, order}), layers: [[id]], routes: [{from, to, via}],
 *     width, height}; `via` are the top-left corners of the slots a long edge passes through.
 */
export function layoutDag(ids, edges, options = {}) {
  const { nodeWidth = 200, nodeHeight = 56, gapX = 72, gapY = 24, sortKey = (id) => id } = options;
  const known = new Set(ids);
  const links = dedupe(edges.filter((e) => known.has(e.from) && known.has(e.to) && e.from !== e.to));
  const layerOf = assignLayers(ids, links, sortKey);
  const layers = [];
  for (const id of [...ids].sort((a, b) => compare(sortKey(a), sortKey(b)))) {
    (layers[layerOf.get(id)] ||= []).push(id);
  }
  const { segments, chains } = addVirtualNodes(links, layerOf, layers);
  orderLayers(layers, segments);
  return place(layers, chains, known, { nodeWidth, nodeHeight, gapX, gapY });
}

function dedupe(links) {
  const seen = new Set();
  return links.filter((l) => {
    const key = `${l.from}\u0000${l.to}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

function compare(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

// Longest path from a source: each node sits one layer right of its furthest parent. Nodes on
// a cycle (records should not have any) are released one at a time so the layout still ends.
function assignLayers(ids, links, sortKey) {
  const parents = new Map(ids.map((id) => [id, []]));
  const children = new Map(ids.map((id) => [id, []]));
  for (const { from, to } of links) {
    parents.get(to).push(from);
    children.get(from).push(to);
  }
  const layer = new Map();
  const waiting = new Map(ids.map((id) => [id, parents.get(id).length]));
  const ready = ids.filter((id) => waiting.get(id) === 0);
  const visit = (id) => {
    layer.set(id, Math.max(-1, ...parents.get(id).map((p) => layer.get(p) ?? -1)) + 1);
    for (const child of children.get(id)) {
      waiting.set(child, waiting.get(child) - 1);
      if (waiting.get(child) === 0) ready.push(child);
    }
  };
  while (layer.size < ids.length) {
    while (ready.length) {
      const id = ready.shift();
      if (!layer.has(id)) visit(id);
    }
    const stuck = ids.filter((id) => !layer.has(id)).sort((a, b) => compare(sortKey(a), sortKey(b)));
    if (stuck.length) visit(stuck[0]);
  }
  return layer;
}

// An edge spanning several layers becomes a chain through one virtual node per layer.
// Edges that point backwards (only on a cycle) are drawn as they are, without virtual nodes.
function addVirtualNodes(links, layerOf, layers) {
  const segments = [];
  const chains = [];
  links.forEach((link, index) => {
    const start = layerOf.get(link.from);
    const end = layerOf.get(link.to);
    const chain = [link.from];
    for (let layer = start + 1; layer < end; layer++) {
      const virtual = `\u0000v${index}:${layer}`;
      layers[layer].push(virtual);
      chain.push(virtual);
    }
    chain.push(link.to);
    for (let i = 0; i + 1 < chain.length; i++) segments.push({ from: chain[i], to: chain[i + 1] });
    chains.push({ from: link.from, to: link.to, chain });
  });
  return { segments, chains };
}

function orderLayers(layers, segments) {
  const up = new Map();
  const down = new Map();
  for (const { from, to } of segments) {
    (up.get(to) || up.set(to, []).get(to)).push(from);
    (down.get(from) || down.set(from, []).get(from)).push(to);
  }
  const index = new Map();
  const reindex = (layer) => layer.forEach((id, i) => index.set(id, layer.length > 1 ? i / (layer.length - 1) : 0.5));
  layers.forEach(reindex);
  const sweep = (layer, neighbours) => {
    const weight = new Map(layer.map((id) => {
      const near = (neighbours.get(id) || []).map((n) => index.get(n));
      return [id, near.length ? near.reduce((a, b) => a + b, 0) / near.length : index.get(id)];
    }));
    layer.sort((a, b) => weight.get(a) - weight.get(b));
    reindex(layer);
  };
  for (let round = 0; round < 6; round++) {
    for (let i = 1; i < layers.length; i++) sweep(layers[i], up);
    for (let i = layers.length - 2; i >= 0; i--) sweep(layers[i], down);
  }
}

function place(layers, chains, real, { nodeWidth, nodeHeight, gapX, gapY }) {
  const tallest = Math.max(1, ...layers.map((l) => l.length));
  const height = tallest * nodeHeight + (tallest - 1) * gapY;
  const slots = new Map();
  layers.forEach((layer, depth) => {
    const span = layer.length * nodeHeight + (layer.length - 1) * gapY;
    const top = (height - span) / 2;
    layer.forEach((id, order) => slots.set(id, { x: depth * (nodeWidth + gapX), y: top + order * (nodeHeight + gapY) }));
  });
  const positions = new Map();
  const realLayers = layers.map((layer, depth) => {
    const kept = layer.filter((id) => real.has(id));
    kept.forEach((id, order) => positions.set(id, { ...slots.get(id), layer: depth, order }));
    return kept;
  });
  const routes = chains.map(({ from, to, chain }) => ({ from, to, via: chain.slice(1, -1).map((v) => slots.get(v)) }));
  const width = layers.length * nodeWidth + Math.max(0, layers.length - 1) * gapX;
  return { positions, layers: realLayers, routes, width, height };
}
