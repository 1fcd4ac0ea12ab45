// Layered drawing of a rewrite graph (Sugiyama style, left to right, sink on the right), run in a web worker so a
// big graph never blocks the page: the page posts {key, graph, order} (or {key, text}: the /ctxs line holding them)
// and gets {key, layout} back.
// graph: {id: {label, src: [[index, id]]}} (the server's /ctxs message), order: the ids sources first. layout: boxes by
// id as [x, y, width, height] from the top left, edges [src, dst, index, points], width, height, hidden (nodes not
// drawn), labels (what a merged repeat shows instead). The steps, in order: collapse a graph past MAX_NODES, layers by
// longest path, dummy nodes on long edges, barycenter sweeps to order each layer, then coordinates. Linear passes
// only. test/viz/layout_reference.py is the same algorithm in Python; the browser tests compare the two.
"use strict";

const CHAR_WIDTH = 7.2, LINE_HEIGHT = 14, PADDING = 8; // px, for style.css's 12px monospace node labels
const MAX_LABEL_CHARS = 48, MAX_LABEL_LINES = 10; // longer labels are cut when drawn (app.js cuts the same way)
const LAYER_GAP = 56, NODE_GAP = 12;
const MAX_NODES = 3000; // bigger graphs keep the nodes nearest the sink, the rest become one "hidden" node
const SWEEPS = 4; // barycenter sweeps, alternating down and up
const HIDDEN_ID = -1; // id of the node that stands for the hidden part of a collapsed graph

function labelSize(label) {
  const lines = label.split("\n").slice(0, MAX_LABEL_LINES);
  let chars = 0;
  for (const line of lines) chars = Math.max(chars, Math.min(line.length, MAX_LABEL_CHARS));
  return [chars * CHAR_WIDTH + 2 * PADDING, lines.length * LINE_HEIGHT + PADDING];
}

// inputs [[index, source id]] per node and labels (Maps in graph order), at most maxNodes nodes: repeats merged, then
// those fewest edges from a sink; the rest become one node (HIDDEN_ID) feeding every kept node whose sources were cut
// nodes are numbered by their place in `order` (small integers are what Maps and arrays are fast with; ids are not)
function collapse(graph, order, maxNodes) {
  let inputs = new Map(), labels = new Map();
  const place = new Map(order.map((id, n) => [id, n]));
  order.forEach((id, n) => {
    const node = graph[id];
    inputs.set(n, node.src.filter(([, s]) => place.has(s)).map(([i, s]) => [Number(i), place.get(s)]));
    labels.set(n, String(node.label));
  });
  if (inputs.size <= maxNodes) return [inputs, labels];
  [inputs, labels] = mergeRepeats(inputs, labels);
  if (inputs.size <= maxNodes) return [inputs, labels];
  const used = new Set();
  for (const srcs of inputs.values()) for (const [, s] of srcs) used.add(s);
  const kept = new Set([...inputs.keys()].reverse().filter((n) => !used.has(n))); // the graph's own sink first
  let frontier = [...kept];
  while (frontier.length && kept.size < maxNodes) { // breadth first from the sinks
    const found = new Set();
    for (const n of frontier) for (const [, s] of inputs.get(n)) if (!kept.has(s)) found.add(s);
    for (const s of found) kept.add(s);
    frontier = [...found];
  }
  const keptList = [...kept].slice(0, maxNodes), keptSet = new Set(keptList);
  const cut = new Map(), cutLabels = new Map();
  for (const n of keptList) {
    const srcs = inputs.get(n), mine = srcs.filter(([, s]) => keptSet.has(s));
    if (mine.length < srcs.length) mine.push([srcs.length, HIDDEN_ID]);
    cut.set(n, mine);
    cutLabels.set(n, labels.get(n));
  }
  cut.set(HIDDEN_ID, []);
  cutLabels.set(HIDDEN_ID, `${inputs.size - keptList.length} more nodes\n(graph too big to draw)`);
  return [cut, cutLabels];
}

// repeated subgraphs drawn once: nodes whose labels match up to numbers and whose sources are the same repeated
// subgraphs become one node marked with its count (inputs come sources first)
function mergeRepeats(inputs, labels) {
  const structures = new Map(), shapeOf = new Map(), firstOf = new Map(), drawn = new Map(), counts = new Map();
  const masked = new Map(); // label -> label with its numbers masked (labels repeat: each is masked once)
  for (const [n, srcs] of inputs) {
    const label = labels.get(n), shapes = srcs.map(([i, s]) => `${i}:${shapeOf.get(s)}`).join(",");
    if (!masked.has(label)) masked.set(label, label.replace(/\d+/g, "#"));
    const key = `${masked.get(label)}\u0000${shapes}`;
    if (!structures.has(key)) structures.set(key, structures.size);
    const shape = structures.get(key);
    shapeOf.set(n, shape);
    if (!firstOf.has(shape)) firstOf.set(shape, n);
    const rep = firstOf.get(shape);
    drawn.set(n, rep);
    counts.set(rep, (counts.get(rep) || 0) + 1);
  }
  const merged = new Map(), mergedLabels = new Map();
  for (const [rep, k] of counts) {
    const srcs = [];
    for (const [i, s] of inputs.get(rep)) {
      const d = drawn.get(s); // a node has a few inputs: a scan finds repeats faster than a Set per node
      if (!srcs.some(([j, t]) => j === i && t === d)) srcs.push([i, d]);
    }
    merged.set(rep, srcs);
    mergedLabels.set(rep, labels.get(rep) + (k > 1 ? `\nrepeated ${k} times (drawn once)` : ""));
  }
  return [merged, mergedLabels];
}

// sources before users (Kahn's algorithm); nodes on a cycle are appended last
function topologicalOrder(sources) {
  const pending = new Map(), users = new Map();
  for (const [n, srcs] of sources) {
    pending.set(n, srcs.length);
    users.set(n, []);
  }
  for (const [n, srcs] of sources) for (const s of srcs) users.get(s).push(n);
  const order = [...sources.keys()].filter((n) => pending.get(n) === 0);
  for (let k = 0; k < order.length; k++) { // order grows while it is walked
    for (const u of users.get(order[k])) {
      pending.set(u, pending.get(u) - 1);
      if (pending.get(u) === 0) order.push(u);
    }
  }
  if (order.length < sources.size) {
    const seen = new Set(order);
    for (const n of sources.keys()) if (!seen.has(n)) order.push(n);
  }
  return order;
}

// longest path from the sources, then every node moved right to just before its first user
function assignLayers(order, sources) {
  const layer = new Map(), firstUser = new Map();
  for (const n of order) {
    let deepest = -1;
    for (const s of sources.get(n)) deepest = Math.max(deepest, layer.has(s) ? layer.get(s) : -1);
    layer.set(n, 1 + deepest);
  }
  for (let k = order.length - 1; k >= 0; k--) {
    const n = order[k];
    if (firstUser.has(n)) layer.set(n, Math.max(layer.get(n), firstUser.get(n) - 1)); // leaves beside their first user
    for (const s of sources.get(n)) {
      firstUser.set(s, Math.min(firstUser.has(s) ? firstUser.get(s) : Infinity, layer.get(n)));
    }
  }
  return layer;
}

// slots 0..n-1 are the real nodes in order, then one dummy slot per layer crossed by a long edge; the shortest edges
// get dummies first, within a budget of the node count (longer ones are drawn straight)
function buildGrid(order, sources, layer) {
  const slot = new Map(order.map((n, i) => [n, i]));
  let layers = 0;
  for (const n of order) layers = Math.max(layers, layer.get(n) + 1);
  const grid = { layers: Array.from({ length: layers }, () => []), preds: order.map(() => []),
    succs: order.map(() => []), chains: new Map() };
  for (const n of order) grid.layers[layer.get(n)].push(slot.get(n));
  const edges = []; // sources are unique per node, so each (source, user) pair comes once
  for (const n of order) {
    for (const s of sources.get(n)) edges.push([layer.get(n) - layer.get(s), slot.get(s), slot.get(n)]);
  }
  edges.sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2]);
  let budget = order.length + 100;
  for (const [span, s, n] of edges) {
    const chain = [];
    if (span > 1 && span <= budget) {
      budget -= span - 1;
      for (let i = 0; i < span - 1; i++) {
        grid.preds.push([]);
        grid.succs.push([]);
        chain.push(grid.preds.length - 1);
        grid.layers[layer.get(order[s]) + 1 + i].push(chain[i]);
      }
      grid.chains.set(edgeKey(s, n), chain);
    }
    const path = [s, ...chain, n];
    for (let i = 1; i < path.length; i++) {
      grid.succs[path[i - 1]].push(path[i]);
      grid.preds[path[i]].push(path[i - 1]);
    }
  }
  return grid;
}

const edgeKey = (src, dst) => src * 67108864 + dst; // 2 ** 26 slots at most: one exact number per edge

function neighbourMeans(nodes, neighbours, values) {
  return nodes.map((n) => {
    const near = neighbours[n];
    if (!near.length) return values[n];
    let sum = 0;
    for (const m of near) sum += values[m];
    return sum / near.length;
  });
}

// barycenter sweeps: each node moves to the mean relative position of its neighbours on the side swept from
function orderLayers(grid) {
  const position = new Float64Array(grid.preds.length);
  const spread = (nodes) => {
    const scale = 1 / Math.max(nodes.length - 1, 1);
    nodes.forEach((n, i) => (position[n] = i * scale));
  };
  grid.layers.forEach(spread);
  for (let sweep = 0; sweep < SWEEPS; sweep++) {
    const down = sweep % 2 === 0, neighbours = down ? grid.preds : grid.succs;
    const layers = down ? grid.layers : [...grid.layers].reverse();
    for (const nodes of layers) {
      if (nodes.length < 2) continue;
      const keys = neighbourMeans(nodes, neighbours, position);
      const sorted = nodes.map((_, i) => i).sort((a, b) => keys[a] - keys[b]).map((i) => nodes[i]); // stable
      nodes.splice(0, nodes.length, ...sorted);
      spread(nodes);
    }
  }
}

// centres as close to `want` as the order and gaps allow: the mean of a packing from the top and one from the bottom
function placeColumn(nodes, want, heights) {
  if (nodes.length === 1) return [want[0]];
  const down = [];
  let bottom = -Infinity;
  nodes.forEach((n, i) => {
    const half = heights[n] / 2, centre = want[i] - half >= bottom ? want[i] : bottom + half;
    down.push(centre);
    bottom = centre + half + NODE_GAP;
  });
  const up = new Array(nodes.length);
  let ceiling = Infinity;
  for (let i = nodes.length - 1; i >= 0; i--) {
    const half = heights[nodes[i]] / 2, centre = want[i] + half <= ceiling ? want[i] : ceiling - half;
    up[i] = centre;
    ceiling = centre - half - NODE_GAP;
  }
  return down.map((a, i) => (a + up[i]) / 2);
}

// centre y of every slot: stacked columns, then sweeps pulling each column towards its neighbours
function assignY(grid, heights) {
  const center = new Array(heights.length).fill(0);
  for (const nodes of grid.layers) {
    let y = 0;
    for (const n of nodes) {
      center[n] = y + heights[n] / 2;
      y += heights[n] + NODE_GAP;
    }
  }
  for (let sweep = 0; sweep < SWEEPS; sweep++) {
    const neighbours = sweep % 2 === 0 ? grid.preds : grid.succs;
    const layers = sweep % 2 === 0 ? grid.layers : [...grid.layers].reverse();
    for (const nodes of layers) {
      const placed = placeColumn(nodes, neighbourMeans(nodes, neighbours, center), heights);
      nodes.forEach((n, i) => (center[n] = placed[i]));
    }
  }
  return center;
}

// src's right side, across each dummy's column at the dummy's height, to dst's left side (whole pixels)
function route(grid, src, dst, boxes, columns, center, srcLayer) {
  const [sx, sy, sw, sh] = boxes[src], points = [[sx + sw, sy + sh / 2]];
  (grid.chains.get(edgeKey(src, dst)) || []).forEach((d, i) => {
    const [x, w] = columns[srcLayer + 1 + i];
    points.push([x, center[d]], [x + w, center[d]]);
  });
  const [dx, dy, , dh] = boxes[dst];
  points.push([dx, dy + dh / 2]);
  return points.map(([x, y]) => [Math.round(x), Math.round(y)]);
}

function layoutGraph(graph, order, maxNodes = MAX_NODES) {
  const [inputs, labels] = collapse(graph, order, maxNodes);
  const sources = new Map();
  for (const [n, srcs] of inputs) {
    const unique = [];
    for (const [, s] of srcs) if (!unique.includes(s)) unique.push(s);
    sources.set(n, unique);
  }
  const nodes = topologicalOrder(sources), layer = assignLayers(nodes, sources);
  const grid = buildGrid(nodes, sources, layer);
  orderLayers(grid);
  const sizes = nodes.map((n) => labelSize(labels.get(n)));
  const heights = [...sizes.map(([, h]) => h), ...new Array(grid.preds.length - nodes.length).fill(0)];
  let center = assignY(grid, heights);
  const top = center.reduce((lo, c, i) => Math.min(lo, c - heights[i] / 2), center.length ? Infinity : 0);
  center = center.map((c) => c - top);
  const columns = []; // [x, width] per layer
  for (const slots of grid.layers) {
    const last = columns[columns.length - 1], x = last ? last[0] + last[1] + LAYER_GAP : 0;
    let width = 0;
    for (const n of slots) if (n < nodes.length) width = Math.max(width, sizes[n][0]);
    columns.push([x, width]);
  }
  const boxes = nodes.map((n, i) => [columns[layer.get(n)][0], center[i] - sizes[i][1] / 2, ...sizes[i]]);
  const out = { boxes: {}, edges: [], width: 0, height: 0, labels: {},
    hidden: order.length - nodes.length + (inputs.has(HIDDEN_ID) ? 1 : 0) }; // real nodes not drawn
  const idOf = (n) => (n === HIDDEN_ID ? HIDDEN_ID : order[n]);
  nodes.forEach((n, i) => {
    out.boxes[idOf(n)] = boxes[i].map(Math.round);
    if (n !== HIDDEN_ID && labels.get(n) !== String(graph[order[n]].label)) out.labels[order[n]] = labels.get(n);
  });
  const lastColumn = columns[columns.length - 1];
  out.width = lastColumn ? Math.round(lastColumn[0] + lastColumn[1]) : 0;
  out.height = Math.round(boxes.reduce((h, b) => Math.max(h, b[1] + b[3]), 0));
  const slot = new Map(nodes.map((n, i) => [n, i]));
  nodes.forEach((n, i) => {
    for (const [index, s] of inputs.get(n)) {
      out.edges.push([idOf(s), idOf(n), index, route(grid, slot.get(s), i, boxes, columns, center, layer.get(s))]);
    }
  });
  return out;
}

if (typeof WorkerGlobalScope !== "undefined" && self instanceof WorkerGlobalScope) {
  self.onmessage = (e) => { // {key, graph, order, maxNodes}, or {key, text}: the server's graph message as it came
    const { key, graph, order, maxNodes } = e.data.text ? { ...JSON.parse(e.data.text), key: e.data.key } : e.data;
    self.postMessage({ key, layout: layoutGraph(graph, order, maxNodes) });
  };
}
