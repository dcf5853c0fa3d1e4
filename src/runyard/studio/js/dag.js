// Left-to-right layered layout of a small DAG: longest-path layering, then barycenter
// ordering sweeps to reduce crossings. Pure: ids in, coordinates out.

/**
 * layoutDag(["a", "b"], [{from: "a", to: "b"}], {nodeWidth, nodeHeight, gapX, gapY})
 * -> {positions: Map(id -> {x, y, layer, order}), width, height, layers: [[id]]}
 */
export function layoutDag(ids, edges, options = {}) {
  const { nodeWidth = 200, nodeHeight = 56, gapX = 72, gapY = 24, sortKey = (id) => id } = options;
  const known = new Set(ids);
  const links = edges.filter((e) => known.has(e.from) && known.has(e.to) && e.from !== e.to);
  const parents = adjacency(ids, links, "to", "from");
  const children = adjacency(ids, links, "from", "to");
  const layerOf = assignLayers(ids, parents, children, sortKey);
  const layers = [];
  for (const id of [...ids].sort((a, b) => compare(sortKey(a), sortKey(b)))) {
    (layers[layerOf.get(id)] ||= []).push(id);
  }
  orderLayers(layers, parents, children);
  return place(layers, { nodeWidth, nodeHeight, gapX, gapY });
}

function adjacency(ids, links, key, value) {
  const map = new Map(ids.map((id) => [id, []]));
  for (const link of links) map.get(link[key]).push(link[value]);
  return map;
}

function compare(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

// Longest path from a source: each node sits one layer right of its furthest parent. Nodes on
// a cycle (records should not have any) are released one at a time so the layout still ends.
function assignLayers(ids, parents, children, sortKey) {
  const layer = new Map();
  const waiting = new Map(ids.map((id) => [id, parents.get(id).length]));
  const ready = ids.filter((id) => waiting.get(id) === 0);
  const visit = (id) => {
    const depth = Math.max(-1, ...parents.get(id).map((p) => layer.get(p) ?? -1)) + 1;
    layer.set(id, depth);
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

function orderLayers(layers, parents, children) {
  const index = new Map();
  const reindex = (layer) => layer.forEach((id, i) => index.set(id, i / Math.max(1, layer.length - 1)));
  layers.forEach(reindex);
  const sweep = (layer, neighbours) => {
    const weight = new Map(layer.map((id, i) => {
      const known = neighbours.get(id).filter((n) => index.has(n)).map((n) => index.get(n));
      return [id, known.length ? known.reduce((a, b) => a + b, 0) / known.length : index.get(id) ?? i];
    }));
    layer.sort((a, b) => weight.get(a) - weight.get(b));
    reindex(layer);
  };
  for (let round = 0; round < 4; round++) {
    for (let i = 1; i < layers.length; i++) sweep(layers[i], parents);
    for (let i = layers.length - 2; i >= 0; i--) sweep(layers[i], children);
  }
}

function place(layers, { nodeWidth, nodeHeight, gapX, gapY }) {
  const tallest = Math.max(1, ...layers.map((l) => l.length));
  const height = tallest * nodeHeight + (tallest - 1) * gapY;
  const positions = new Map();
  layers.forEach((layer, depth) => {
    const span = layer.length * nodeHeight + (layer.length - 1) * gapY;
    const top = (height - span) / 2;
    layer.forEach((id, order) => {
      positions.set(id, { x: depth * (nodeWidth + gapX), y: top + order * (nodeHeight + gapY), layer: depth, order });
    });
  });
  const width = layers.length * nodeWidth + Math.max(0, layers.length - 1) * gapX;
  return { positions, width, height, layers };
}
