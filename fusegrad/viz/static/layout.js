// Layered drawing of a rewrite graph (Sugiyama style, left to right, sink on the right), run in a web worker so a
// big graph never blocks the page: the page posts {key, graph, order} (or {key, text}: the /ctxs line holding them)
// and gets {key, layout} back, its typed arrays transferred (no copy on either side).
// graph: {id: {label, src: [[index, id]]}} (the server's /ctxs message), order: the ids sources first. layout, in
// arrays (drawn node i is node `nodes[i]` of `order`, -1 for the hidden part of a collapsed graph):
//   nodes Int32Array, boxes Int32Array [x, y, width, height] per drawn node from the top left,
//   edges Int32Array [src, dst, index] per edge (drawn node numbers), points Int32Array [x, y, ...] and pointStart
//   Int32Array (edge e's points are pairs pointStart[e] .. pointStart[e + 1] - 1), path (every edge in one SVG path:
//   how the page draws them zoomed out), curves (each edge's own path, null past MERGED_EDGES edges), width, height,
//   hidden (nodes not drawn), notes {drawn node: label} (what a merged repeat shows instead), sketch [[colour, path]]:
//   the boxes as one path per colour (how the page draws nodes zoomed out: a few elements for thousands of nodes).
// The steps, in order: collapse a graph past MAX_NODES, layers by longest path, dummy nodes on long edges, barycenter
// sweeps to order each layer, then coordinates. Linear passes only, on integer node numbers and typed arrays (no
// object per node: a 7,000-node graph is laid out without the collector running). test/viz/layout_reference.py is the
// same algorithm in Python; the browser tests compare the two.
"use strict";

const CHAR_WIDTH = 7.2, LINE_HEIGHT = 14, PADDING = 8; // px, for style.css's 12px monospace node labels
const MAX_LABEL_CHARS = 48, MAX_LABEL_LINES = 10; // longer labels are cut when drawn (app.js cuts the same way)
const LAYER_GAP = 56, NODE_GAP = 12;
const MAX_NODES = 3000; // bigger graphs keep the nodes nearest the sink, the rest become one "hidden" node
const SWEEPS = 4; // barycenter sweeps, alternating down and up
const MERGED_EDGES = 1500; // more edges than this are drawn as one path (thousands of elements cost more than they show)
const HIDDEN = -1; // place of the node that stands for the hidden part of a collapsed graph

function labelSize(label) {
  let chars = 0, lines = 0, start = 0;
  while (lines < MAX_LABEL_LINES) { // the first MAX_LABEL_LINES lines, without splitting the label
    const end = label.indexOf("\n", start), stop = end < 0 ? label.length : end;
    chars = Math.max(chars, Math.min(stop - start, MAX_LABEL_CHARS));
    lines++;
    if (end < 0) break;
    start = end + 1;
  }
  return [chars * CHAR_WIDTH + 2 * PADDING, lines * LINE_HEIGHT + PADDING];
}

// A graph being collapsed: node k is node place[k] of `order` (HIDDEN for the hidden part), its inputs are
// (index[j], src[j]) for j in start[k] .. start[k + 1] - 1, src numbering nodes of this same graph
function makeGraph(place, labels, start, index, src) {
  return { place, labels, start, index, src, size: place.length };
}

// the server's message as a graph: nodes numbered by their place in `order`, inputs from outside it dropped
function readGraph(graph, order) {
  const n = order.length, at = new Map();
  for (let k = 0; k < n; k++) at.set(order[k], k);
  const start = new Int32Array(n + 1), labels = new Array(n), index = [], src = [];
  for (let k = 0; k < n; k++) {
    const node = graph[order[k]];
    labels[k] = String(node.label);
    for (const [i, s] of node.src) {
      const k2 = at.get(s);
      if (k2 === undefined) continue;
      index.push(Number(i));
      src.push(k2);
    }
    start[k + 1] = src.length;
  }
  return makeGraph(Int32Array.from({ length: n }, (_, k) => k), labels, start, Int32Array.from(index), Int32Array.from(src));
}

// at most maxNodes nodes: repeats merged, then those fewest edges from a sink; the rest become one node (HIDDEN)
// feeding every kept node whose sources were cut
function collapse(g, maxNodes) {
  if (g.size <= maxNodes) return g;
  g = mergeRepeats(g);
  if (g.size <= maxNodes) return g;
  const used = new Uint8Array(g.size), kept = new Uint8Array(g.size), keptList = [];
  for (let j = 0; j < g.src.length; j++) used[g.src[j]] = 1;
  for (let k = g.size - 1; k >= 0; k--) { // the graph's own sink first
    if (!used[k]) {
      kept[k] = 1;
      keptList.push(k);
    }
  }
  let frontier = keptList.slice();
  while (frontier.length && keptList.length < maxNodes) { // breadth first from the sinks
    const found = [];
    for (const k of frontier) {
      for (let j = g.start[k]; j < g.start[k + 1]; j++) {
        const s = g.src[j];
        if (!kept[s]) {
          kept[s] = 1;
          found.push(s);
        }
      }
    }
    keptList.push(...found);
    frontier = found;
  }
  keptList.length = Math.min(keptList.length, maxNodes);
  return cutTo(g, keptList);
}

// the graph of `keptList`'s nodes (in that order) and one HIDDEN node last, fed by nothing, feeding every kept node
// that lost a source (as its input after its last one)
function cutTo(g, keptList) {
  const newNumber = new Int32Array(g.size).fill(-1);
  keptList.forEach((k, i) => (newNumber[k] = i));
  const hidden = keptList.length, start = new Int32Array(hidden + 2), index = [], src = [], labels = [];
  keptList.forEach((k, i) => {
    const count = g.start[k + 1] - g.start[k];
    for (let j = g.start[k]; j < g.start[k + 1]; j++) {
      if (newNumber[g.src[j]] < 0) continue;
      index.push(g.index[j]);
      src.push(newNumber[g.src[j]]);
    }
    if (src.length - start[i] < count) {
      index.push(count);
      src.push(hidden);
    }
    start[i + 1] = src.length;
    labels.push(g.labels[k]);
  });
  start[hidden + 1] = src.length;
  labels.push(`${g.size - keptList.length} more nodes\n(graph too big to draw)`);
  const place = Int32Array.from([...keptList.map((k) => g.place[k]), HIDDEN]);
  return makeGraph(place, labels, start, Int32Array.from(index), Int32Array.from(src));
}

// repeated subgraphs drawn once: nodes whose labels match up to numbers and whose sources are the same repeated
// subgraphs become one node marked with its count (inputs come sources first)
function mergeRepeats(g) {
  const structures = new Map(), masked = new Map(); // label -> label with its numbers masked (each label masked once)
  const shapeOf = new Int32Array(g.size), drawn = new Int32Array(g.size), counts = new Int32Array(g.size);
  const firstOf = [];
  for (let k = 0; k < g.size; k++) {
    const label = g.labels[k];
    if (!masked.has(label)) masked.set(label, label.replace(/\d+/g, "#"));
    let key = `${masked.get(label)}\u0000`;
    for (let j = g.start[k]; j < g.start[k + 1]; j++) key += `${j > g.start[k] ? "," : ""}${g.index[j]}:${shapeOf[g.src[j]]}`;
    if (!structures.has(key)) structures.set(key, structures.size);
    const shape = (shapeOf[k] = structures.get(key));
    if (firstOf.length === shape) firstOf.push(k);
    drawn[k] = firstOf[shape];
    counts[drawn[k]]++;
  }
  const reps = [], newNumber = new Int32Array(g.size);
  for (let k = 0; k < g.size; k++) {
    if (drawn[k] !== k) continue;
    newNumber[k] = reps.length;
    reps.push(k);
  }
  const start = new Int32Array(reps.length + 1), index = [], src = [], labels = [];
  reps.forEach((rep, r) => {
    for (let j = g.start[rep]; j < g.start[rep + 1]; j++) {
      const i = g.index[j], d = newNumber[drawn[g.src[j]]];
      let seen = false; // a node has a few inputs: a scan finds repeats faster than a Set per node
      for (let m = start[r]; m < src.length && !seen; m++) seen = index[m] === i && src[m] === d;
      if (seen) continue;
      index.push(i);
      src.push(d);
    }
    start[r + 1] = src.length;
    labels.push(g.labels[rep] + (counts[rep] > 1 ? `\nrepeated ${counts[rep]} times (drawn once)` : ""));
  });
  const place = Int32Array.from(reps, (k) => g.place[k]);
  return makeGraph(place, labels, start, Int32Array.from(index), Int32Array.from(src));
}

// each node's distinct sources, in input order (an edge per pair, however many inputs it feeds)
function distinctSources(g) {
  const start = new Int32Array(g.size + 1), src = [];
  for (let k = 0; k < g.size; k++) {
    for (let j = g.start[k]; j < g.start[k + 1]; j++) {
      let seen = false;
      for (let m = start[k]; m < src.length && !seen; m++) seen = src[m] === g.src[j];
      if (!seen) src.push(g.src[j]);
    }
    start[k + 1] = src.length;
  }
  return { start, src: Int32Array.from(src) };
}

// the users of every node as CSR arrays, each node's users in the order the nodes use it
function usersOf(size, sources) {
  const start = new Int32Array(size + 1), fill = new Int32Array(size), users = new Int32Array(sources.src.length);
  for (const s of sources.src) start[s + 1]++;
  for (let k = 0; k < size; k++) start[k + 1] += start[k];
  for (let k = 0; k < size; k++) {
    for (let j = sources.start[k]; j < sources.start[k + 1]; j++) {
      const s = sources.src[j];
      users[start[s] + fill[s]++] = k;
    }
  }
  return { start, src: users };
}

// sources before users (Kahn's algorithm); nodes on a cycle are appended last
function topologicalOrder(size, sources) {
  const pending = new Int32Array(size), users = usersOf(size, sources), order = new Int32Array(size);
  let length = 0;
  for (let k = 0; k < size; k++) {
    pending[k] = sources.start[k + 1] - sources.start[k];
    if (!pending[k]) order[length++] = k;
  }
  for (let i = 0; i < length; i++) { // order grows while it is walked
    const k = order[i];
    for (let j = users.start[k]; j < users.start[k + 1]; j++) if (--pending[users.src[j]] === 0) order[length++] = users.src[j];
  }
  if (length < size) {
    const seen = new Uint8Array(size);
    for (let i = 0; i < length; i++) seen[order[i]] = 1;
    for (let k = 0; k < size; k++) if (!seen[k]) order[length++] = k;
  }
  return order;
}

// longest path from the sources, then every node moved right to just before its first user
function assignLayers(order, sources) {
  const layer = new Int32Array(order.length).fill(-1), firstUser = new Float64Array(order.length).fill(Infinity);
  for (const k of order) {
    let deepest = -1;
    for (let j = sources.start[k]; j < sources.start[k + 1]; j++) deepest = Math.max(deepest, layer[sources.src[j]]);
    layer[k] = 1 + deepest;
  }
  for (let i = order.length - 1; i >= 0; i--) {
    const k = order[i];
    if (firstUser[k] !== Infinity) layer[k] = Math.max(layer[k], firstUser[k] - 1); // leaves beside their first user
    for (let j = sources.start[k]; j < sources.start[k + 1]; j++) {
      const s = sources.src[j];
      firstUser[s] = Math.min(firstUser[s], layer[k]);
    }
  }
  return layer;
}

// slots 0..n-1 are the real nodes in topological order, then one dummy slot per layer crossed by a long edge (a
// chain's dummies are consecutive slots); the shortest edges get dummies first, within a budget of the node count
// (longer ones are drawn straight). preds and succs are CSR arrays, neighbours in the order the edges were added.
function buildGrid(order, sources, layer) {
  const n = order.length, slotOf = new Int32Array(n);
  order.forEach((k, i) => (slotOf[k] = i));
  let layers = 0;
  for (let i = 0; i < n; i++) layers = Math.max(layers, layer[order[i]] + 1);
  const grid = { layers: Array.from({ length: layers }, () => []), layerOf: [], chains: new Map(), slots: n };
  for (let i = 0; i < n; i++) {
    grid.layers[layer[order[i]]].push(i);
    grid.layerOf.push(layer[order[i]]);
  }
  const count = sources.src.length, span = new Int32Array(count), from = new Int32Array(count), to = new Int32Array(count);
  let e = 0; // sources are distinct per node, so each (source, user) pair comes once
  for (let i = 0; i < n; i++) {
    const k = order[i];
    for (let j = sources.start[k]; j < sources.start[k + 1]; j++, e++) {
      span[e] = layer[k] - layer[sources.src[j]];
      from[e] = slotOf[sources.src[j]];
      to[e] = i;
    }
  }
  const sorted = Array.from({ length: count }, (_, i) => i)
    .sort((a, b) => span[a] - span[b] || from[a] - from[b] || to[a] - to[b]);
  const links = []; // [from slot, to slot] per piece of an edge, in the order the reference adds them
  let budget = n + 100;
  for (const i of sorted) {
    let prev = from[i];
    if (span[i] > 1 && span[i] <= budget) {
      budget -= span[i] - 1;
      grid.chains.set(edgeKey(from[i], to[i]), grid.slots);
      for (let d = 0; d < span[i] - 1; d++) {
        grid.layers[grid.layerOf[from[i]] + 1 + d].push(grid.slots);
        grid.layerOf.push(grid.layerOf[from[i]] + 1 + d);
        links.push(prev, grid.slots);
        prev = grid.slots++;
      }
    }
    links.push(prev, to[i]);
  }
  grid.preds = adjacency(grid.slots, links, 1, 0);
  grid.succs = adjacency(grid.slots, links, 0, 1);
  return grid;
}

// CSR neighbours from flat [a, b] pairs: node pair[at]'s list gets pair[other], in pair order
function adjacency(size, links, at, other) {
  const start = new Int32Array(size + 1), fill = new Int32Array(size), near = new Int32Array(links.length / 2);
  for (let p = 0; p < links.length; p += 2) start[links[p + at] + 1]++;
  for (let k = 0; k < size; k++) start[k + 1] += start[k];
  for (let p = 0; p < links.length; p += 2) near[start[links[p + at]] + fill[links[p + at]]++] = links[p + other];
  return { start, near };
}

const edgeKey = (src, dst) => src * 67108864 + dst; // 2 ** 26 slots at most: one exact number per edge

// the mean of each node's neighbours' values (its own value when it has none), into out[0 .. nodes.length - 1]
function neighbourMeans(nodes, neighbours, values, out) {
  for (let i = 0; i < nodes.length; i++) {
    const n = nodes[i], a = neighbours.start[n], b = neighbours.start[n + 1];
    if (a === b) {
      out[i] = values[n];
      continue;
    }
    let sum = 0;
    for (let j = a; j < b; j++) sum += values[neighbours.near[j]];
    out[i] = sum / (b - a);
  }
  return out;
}

// barycenter sweeps: each node moves to the mean relative position of its neighbours on the side swept from
function orderLayers(grid) {
  const position = new Float64Array(grid.slots), keys = new Float64Array(grid.slots);
  const spread = (nodes) => {
    const scale = 1 / Math.max(nodes.length - 1, 1);
    for (let i = 0; i < nodes.length; i++) position[nodes[i]] = i * scale;
  };
  grid.layers.forEach(spread);
  for (let sweep = 0; sweep < SWEEPS; sweep++) {
    const down = sweep % 2 === 0, neighbours = down ? grid.preds : grid.succs;
    for (let l = 0; l < grid.layers.length; l++) {
      const nodes = grid.layers[down ? l : grid.layers.length - 1 - l];
      if (nodes.length < 2) continue;
      neighbourMeans(nodes, neighbours, position, keys);
      const sorted = nodes.map((_, i) => i).sort((a, b) => keys[a] - keys[b]).map((i) => nodes[i]); // stable
      for (let i = 0; i < nodes.length; i++) nodes[i] = sorted[i];
      spread(nodes);
    }
  }
}

// centres as close to `want` as the order and gaps allow: the mean of a packing from the top and one from the bottom
// (want[i] is node nodes[i]'s; the result goes into center)
function placeColumn(nodes, want, heights, center, up) {
  if (nodes.length === 1) {
    center[nodes[0]] = want[0];
    return;
  }
  let ceiling = Infinity;
  for (let i = nodes.length - 1; i >= 0; i--) {
    const half = heights[nodes[i]] / 2, c = want[i] + half <= ceiling ? want[i] : ceiling - half;
    up[i] = c;
    ceiling = c - half - NODE_GAP;
  }
  let bottom = -Infinity;
  for (let i = 0; i < nodes.length; i++) {
    const half = heights[nodes[i]] / 2, c = want[i] - half >= bottom ? want[i] : bottom + half;
    bottom = c + half + NODE_GAP;
    center[nodes[i]] = (c + up[i]) / 2;
  }
}

// centre y of every slot: stacked columns, then sweeps pulling each column towards its neighbours
function assignY(grid, heights) {
  const center = new Float64Array(grid.slots), want = new Float64Array(grid.slots), up = new Float64Array(grid.slots);
  for (const nodes of grid.layers) {
    let y = 0;
    for (const n of nodes) {
      center[n] = y + heights[n] / 2;
      y += heights[n] + NODE_GAP;
    }
  }
  for (let sweep = 0; sweep < SWEEPS; sweep++) {
    const down = sweep % 2 === 0, neighbours = down ? grid.preds : grid.succs;
    for (let l = 0; l < grid.layers.length; l++) {
      const nodes = grid.layers[down ? l : grid.layers.length - 1 - l];
      placeColumn(nodes, neighbourMeans(nodes, neighbours, center, want), heights, center, up);
    }
  }
  return center;
}

// [x, width] per layer: a column as wide as its widest real node, LAYER_GAP apart
function columnsOf(grid, widths) {
  const x = new Float64Array(grid.layers.length), width = new Float64Array(grid.layers.length);
  grid.layers.forEach((slots, l) => {
    if (l) x[l] = x[l - 1] + width[l - 1] + LAYER_GAP;
    for (const n of slots) if (n < widths.length) width[l] = Math.max(width[l], widths[n]);
  });
  return { x, width };
}

// every input as an edge from src's right side, across each dummy's column at the dummy's height, to dst's left side
// (whole pixels): edges in the order of the drawn nodes and their inputs
function routeEdges(g, order, slotOf, grid, boxes, columns, center) {
  const edges = [], points = [], pointStart = [0];
  const add = (x, y) => points.push(Math.round(x), Math.round(y));
  for (let i = 0; i < order.length; i++) {
    const k = order[i];
    for (let j = g.start[k]; j < g.start[k + 1]; j++) {
      const s = slotOf[g.src[j]];
      edges.push(s, i, g.index[j]);
      add(boxes[4 * s] + boxes[4 * s + 2], boxes[4 * s + 1] + boxes[4 * s + 3] / 2);
      const first = grid.chains.get(edgeKey(s, i)), srcLayer = grid.layerOf[s];
      for (let d = 0; first !== undefined && d < grid.layerOf[i] - srcLayer - 1; d++) {
        const x = columns.x[srcLayer + 1 + d];
        add(x, center[first + d]);
        add(x + columns.width[srcLayer + 1 + d], center[first + d]);
      }
      add(boxes[4 * i], boxes[4 * i + 1] + boxes[4 * i + 3] / 2);
      pointStart.push(points.length / 2);
    }
  }
  return { edges: Int32Array.from(edges), points: Int32Array.from(points), pointStart: Int32Array.from(pointStart) };
}

// a smooth left-to-right SVG path through edge e's points
function curve(points, pointStart, e) {
  let x0 = points[2 * pointStart[e]], y0 = points[2 * pointStart[e] + 1], d = `M${x0},${y0}`;
  for (let p = pointStart[e] + 1; p < pointStart[e + 1]; p++) {
    const x1 = points[2 * p], y1 = points[2 * p + 1], dx = (x1 - x0) / 2;
    d += ` C${x0 + dx},${y0} ${x1 - dx},${y1} ${x1},${y1}`;
    [x0, y0] = [x1, y1];
  }
  return d;
}

// one path for all edges, and each edge's own (up to MERGED_EDGES edges)
function drawEdges(layout) {
  const count = layout.pointStart.length - 1, curves = [];
  for (let e = 0; e < count; e++) curves.push(curve(layout.points, layout.pointStart, e));
  return { curves: count > MERGED_EDGES ? null : curves, path: curves.join("") };
}

// every box as a rectangle of one path per fill colour (the hidden part's box is grey)
function sketchBoxes(graph, order, layout) {
  const paths = new Map();
  for (let i = 0; i < layout.nodes.length; i++) {
    const place = layout.nodes[i], color = place < 0 ? "#666" : String(graph[order[place]].color || "#fff");
    const [x, y, w, h] = layout.boxes.subarray(4 * i, 4 * i + 4);
    if (!paths.has(color)) paths.set(color, []);
    paths.get(color).push(`M${x},${y}h${w}v${h}h${-w}z`);
  }
  return [...paths].map(([color, parts]) => [color, parts.join("")]);
}

function layoutGraph(graph, order, maxNodes = MAX_NODES) {
  const g = collapse(readGraph(graph, order), maxNodes), sources = distinctSources(g);
  const nodes = topologicalOrder(g.size, sources), layer = assignLayers(nodes, sources);
  const grid = buildGrid(nodes, sources, layer);
  orderLayers(grid);
  const n = nodes.length, widths = new Float64Array(n), heights = new Float64Array(grid.slots);
  for (let i = 0; i < n; i++) [widths[i], heights[i]] = labelSize(g.labels[nodes[i]]);
  const center = assignY(grid, heights);
  let top = n ? Infinity : 0;
  for (let i = 0; i < grid.slots; i++) top = Math.min(top, center[i] - heights[i] / 2);
  for (let i = 0; i < grid.slots; i++) center[i] -= top;
  const columns = columnsOf(grid, widths), boxes = new Float64Array(4 * n);
  let height = 0;
  for (let i = 0; i < n; i++) {
    boxes.set([columns.x[layer[nodes[i]]], center[i] - heights[i] / 2, widths[i], heights[i]], 4 * i);
    height = Math.max(height, boxes[4 * i + 1] + heights[i]);
  }
  const slotOf = new Int32Array(n), notes = {};
  nodes.forEach((k, i) => (slotOf[k] = i));
  const out = { nodes: Int32Array.from(nodes, (k) => g.place[k]), boxes: Int32Array.from(boxes, Math.round), notes,
    width: 0, height: Math.round(height), hidden: order.length - n + (n && g.place[g.size - 1] === HIDDEN ? 1 : 0),
    ...routeEdges(g, nodes, slotOf, grid, boxes, columns, center) }; // hidden: the real nodes not drawn
  for (let i = 0; i < n; i++) {
    const place = g.place[nodes[i]];
    if (place !== HIDDEN && g.labels[nodes[i]] !== String(graph[order[place]].label)) notes[i] = g.labels[nodes[i]];
  }
  const last = grid.layers.length - 1;
  out.width = last >= 0 ? Math.round(columns.x[last] + columns.width[last]) : 0;
  return Object.assign(out, drawEdges(out), { sketch: sketchBoxes(graph, order, out) });
}

// layouts made ahead ({ahead: text}: the page expects that graph message soon), by the message's text, the newest
// AHEAD_KEPT; each is handed out once, when the same text is asked for
const AHEAD_KEPT = 2, ahead = new Map();

function layoutOfText(text) {
  const made = ahead.get(text);
  if (made) ahead.delete(text);
  return made || layoutOfMessage(JSON.parse(text));
}

function layoutOfMessage({ graph, order, maxNodes }) {
  return layoutGraph(graph, order, maxNodes);
}

if (typeof WorkerGlobalScope !== "undefined" && self instanceof WorkerGlobalScope) {
  // {key, graph, order, maxNodes}, or {key, text}: the server's graph message as it came, or {ahead: text}
  self.onmessage = (e) => {
    if (e.data.ahead) {
      if (!ahead.has(e.data.ahead)) ahead.set(e.data.ahead, layoutOfMessage(JSON.parse(e.data.ahead)));
      while (ahead.size > AHEAD_KEPT) ahead.delete(ahead.keys().next().value);
      return;
    }
    const layout = e.data.text ? layoutOfText(e.data.text) : layoutOfMessage(e.data);
    const arrays = [layout.nodes, layout.boxes, layout.edges, layout.points, layout.pointStart];
    self.postMessage({ key: e.data.key, layout }, arrays.map((a) => a.buffer));
  };
}
