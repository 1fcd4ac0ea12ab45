// fusegrad VIZ, the page: the rewrites view (groups and steps, a step's graph after every match as an SVG DAG laid
// out in a web worker by layout.js) and the profiler (a canvas timeline decoded from /get_profile's packed bytes, as the spec's
// load_profile reads them). Plain JavaScript, no libraries; everything comes from the page's own server.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG_NS = $("graph").namespaceURI; // taken from the inline <svg>, so no namespace URL is spelled out here
const LABEL_CHARS = 48, LABEL_LINES = 10, LINE_HEIGHT = 14, PADDING = 8; // as layout.js sizes the boxes
const MIN_ZOOM = 0.02, MAX_ZOOM = 4, FIT_MARGIN = 20; // graph scale limits; space kept around a fitted graph
const MODES = ["read", "write", "read+write"];

// *** small helpers ***

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  node.append(...children.filter((c) => c !== null && c !== undefined).map((c) => (c instanceof Node ? c : String(c))));
  return node;
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

// each view keeps its own status line, so a view's message (say "replaying…") never shows over another view
const statusOf = { rewrites: "", profiler: "" };
let activeTab = "rewrites";
function setStatus(text, view) {
  statusOf[view] = text;
  if (view === activeTab) $("status").textContent = text;
}
const shortPath = (file) => file.split("/").slice(-2).join("/");
const cut = (line) => (line.length > LABEL_CHARS ? line.slice(0, LABEL_CHARS - 1) + "…" : line);
const clamp = (x, lo, hi) => Math.min(Math.max(x, lo), hi);

function fmtUs(us) {
  if (Math.abs(us) >= 1e6) return (us / 1e6).toFixed(3) + " s";
  if (Math.abs(us) >= 1e3) return (us / 1e3).toFixed(3) + " ms";
  return us.toFixed(us < 10 ? 2 : 1) + " us";
}

function fmtBytes(b) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (b >= 1000 && i < units.length - 1) { b /= 1000; i++; }
  return (i ? b.toFixed(2) : String(b)) + " " + units[i];
}

async function getJSON(url) {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status}`);
  return res.json();
}

// read a JSON-lines response as it arrives, one message per line, given as its text
async function readLines(url, signal, onLine) {
  const res = await fetch(url, { signal });
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status}`);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let pending = []; // the pieces of a line not ended yet: a 1 MB line comes in many reads, each looked at once
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    let chunk = decoder.decode(value, { stream: true }), nl;
    while ((nl = chunk.indexOf("\n")) >= 0) {
      pending.push(chunk.slice(0, nl));
      chunk = chunk.slice(nl + 1);
      const line = pending.join("");
      pending = [];
      if (line) onLine(line);
    }
    if (chunk) pending.push(chunk);
  }
}

function showTab(name) {
  activeTab = name;
  $("status").textContent = statusOf[name];
  $("rewrites-view").hidden = name !== "rewrites";
  $("profiler-view").hidden = name !== "profiler";
  $("tab-rewrites").classList.toggle("active", name === "rewrites");
  $("tab-profiler").classList.toggle("active", name === "profiler");
  if (name === "profiler") openProfiler();
}

// *** rewrites: sidebar ***

const rw = { groups: [], ctx: -1, idx: -1, header: null, graphs: [], match: 0, want: 0, abort: null, view: null,
  picked: null, found: "", failed: false, nodes: new Map() };
// replayed steps kept in the page, newest last: going back to one shows it at once, without asking the server
const STEP_CACHE = 8, stepCache = new Map();

function renderSidebar() {
  const list = $("groups");
  list.replaceChildren();
  if (!rw.groups.length) list.append(el("li", { class: "empty" }, "No rewrites were traced."));
  rw.groups.forEach((g, ctx) => {
    const steps = el("ul", { hidden: "" });
    const total = g.steps.reduce((n, s) => n + s.match_count, 0);
    const head = el("div", { title: g.name, onclick: () => openSteps(ctx) },
      el("span", { class: total ? "count some" : "count" }, total), g.name);
    list.append(el("li", { class: g.kernel ? "group kernel" : "group", "data-ctx": ctx }, head, steps));
  });
}

// a group's step list opened (or closed): its first step is most likely picked next, so it is made ready while the
// user reads the list (a 7,000-node graph's first paint was ~40% the server's replay and ~45% its layout)
function openSteps(ctx) {
  const steps = listSteps(ctx);
  steps.toggleAttribute("hidden");
  if (!steps.hidden && rw.groups[ctx].steps.length && !stepCache.has(`${ctx}:0`)) prepareStep(ctx, 0);
}

// the server replays the step in the background (kept there in full), and its first graph is laid out in the worker
// ahead (layout.js keeps it for when that graph's line comes): only a head start, so a failure shows when the step is
// picked. Picking any step stops the reading (`ahead.abort`): the step's own stream then reads its lines once
const ahead = { abort: null };

async function prepareStep(ctx, idx) {
  if (ahead.abort) ahead.abort.abort();
  const abort = (ahead.abort = new AbortController());
  try {
    await fetch(`/prepare?ctx=${ctx}&idx=${idx}`, { signal: abort.signal }); // first: the stream then follows it
    await readLines(`/ctxs?ctx=${ctx}&idx=${idx}`, abort.signal, (line) => {
      if (!line.startsWith('{"kind": "graph"') || abort.signal.aborted) return;
      if (!layouts.worker) startLayoutWorker();
      layouts.worker.postMessage({ ahead: line });
      abort.abort(); // the rest of the step stays on the server, kept
    });
  } catch {
    // aborted, or the server is gone: picking the step says so
  }
}

// a group's steps are listed when it is first opened: a real run has tens of thousands of steps, and that many hidden
// elements made every frame of the graph pane ~25 ms slower. Returns the group's (hidden or shown) list
function listSteps(ctx) {
  const steps = document.querySelector(`#groups li.group[data-ctx="${ctx}"] > ul`), g = rw.groups[ctx];
  if (!steps || steps.childElementCount) return steps;
  g.steps.forEach((s, idx) => {
    const item = el("li", { class: "step", "data-step": `${ctx}:${idx}`, title: `${shortPath(s.loc[0])}:${s.loc[1]}  ${s.code_line}`,
      onclick: () => selectStep(ctx, idx, 0) },
      el("span", { class: s.match_count ? "count some" : "count" }, s.match_count), s.name);
    item.style.paddingLeft = `${18 + 14 * s.depth}px`;
    steps.append(item);
  });
  if (g.kernel) {
    const item = el("li", { class: "step", "data-step": `${ctx}:source`, onclick: () => showKernel(ctx) }, "kernel source");
    item.style.paddingLeft = "18px";
    steps.append(item);
  }
  return steps;
}

function toggleHelp(show) {
  const help = $("help");
  help.hidden = show === undefined ? !help.hidden : !show;
  $("help-button").classList.toggle("active", !help.hidden);
}

function markSelected(key) {
  for (const node of document.querySelectorAll("#groups .step.selected")) node.classList.remove("selected");
  listSteps(Number(key.split(":")[0]));
  const item = document.querySelector(`#groups .step[data-step="${key}"]`);
  if (!item) return;
  item.classList.add("selected");
  item.parentElement.hidden = false;
  item.scrollIntoView({ block: "nearest" });
}

function showPane(which) {
  for (const id of ["match-bar", "graph-wrap"]) $(id).hidden = which !== "graph";
  $("kernel-pane").hidden = which !== "kernel";
}

// every step in sidebar order, for the up/down keys
function allSteps() {
  return rw.groups.flatMap((g, ctx) => g.steps.map((_, idx) => [ctx, idx]));
}

// *** rewrites: one step, streamed ***

// show a step's graphs as they stream in; `want` is the match to show first, `found` search text to highlight
async function selectStep(ctx, idx, want, found = "") {
  if (rw.abort) rw.abort.abort();
  if (ahead.abort) ahead.abort.abort(); // still reading: this stream reads it once (a layout posted ahead stays)
  dropQueuedLayouts();
  const abort = (rw.abort = new AbortController());
  for (const msg of rw.graphs) delete msg.parts; // its elements belong to the step's rw.nodes, dropped here
  rw.drawnMsg = null;
  preparing.queue.length = 0;
  Object.assign(rw, { ctx, idx, header: null, graphs: [], match: 0, want, view: null, picked: null, found, failed: false,
    nodes: new Map() });
  markSelected(`${ctx}:${idx}`);
  showPane("graph");
  $("graph").replaceChildren();
  $("details").replaceChildren();
  $("slider").max = 0;
  $("slider").value = 0;
  const cached = stepCache.get(`${ctx}:${idx}`);
  if (cached) return showCachedStep(`${ctx}:${idx}`, cached);
  setStatus("replaying…", "rewrites");
  try {
    await readLines(`/ctxs?ctx=${ctx}&idx=${idx}`, abort.signal, (line) => { if (abort === rw.abort) onStepLine(line); });
  } catch (e) {
    if (e.name !== "AbortError") setStatus(String(e), "rewrites");
  }
}

function showCachedStep(key, cached) {
  stepCache.delete(key);
  stepCache.set(key, cached); // now the newest
  Object.assign(rw, { header: cached.header, graphs: cached.graphs, abort: null });
  renderStepHead(cached.header);
  $("slider").max = cached.graphs.length - 1;
  showMatch(Math.min(rw.want, cached.graphs.length - 1));
  setStatus(`${cached.graphs.length} graphs`, "rewrites");
  for (const msg of cached.graphs) layOut(msg).then(() => prepareLater(msg)); // this step's elements are new again
}

function keepStep() {
  if (rw.failed || !rw.header) return;
  stepCache.set(`${rw.ctx}:${rw.idx}`, { header: rw.header, graphs: rw.graphs });
  while (stepCache.size > STEP_CACHE) stepCache.delete(stepCache.keys().next().value);
}

// a graph's line goes to the layout worker before this thread parses it (the server writes "kind" first), so the
// worker parses and places it while this thread parses it too; layOut then finds the layout asked for
function onStepLine(line) {
  const held = { msg: null }, early = line.startsWith('{"kind": "graph"') ? askLayout(held, { text: line }) : null;
  const msg = JSON.parse(line);
  if (early) {
    held.msg = msg;
    msg.layoutReady = early.then((layout) => (msg.layout = layout));
  }
  onStepMessage(msg);
}

function onStepMessage(msg) {
  if (msg.kind === "step") {
    rw.header = msg;
    renderStepHead(msg);
  } else if (msg.kind === "graph") {
    rw.graphs.push(msg);
    layOut(msg).then(() => prepareLater(msg)); // queued at once: by the time ←/→ reaches it, it is placed and built
    const last = rw.graphs.length - 1;
    $("slider").max = last;
    if (last === Math.min(rw.want, rw.header.match_count)) showMatch(last);
    else updateMatchLabel();
  } else if (msg.kind === "error") {
    rw.failed = true;
    setStatus(msg.message, "rewrites");
    $("details").prepend(el("h3", {}, "replay failed"), el("pre", {}, msg.message));
  } else if (msg.kind === "done") {
    setStatus(`${msg.count} graphs`, "rewrites");
    keepStep();
    if (rw.want >= msg.count && msg.count) showMatch(msg.count - 1);
  }
}

function renderStepHead(h) {
  const head = $("step-head");
  head.replaceChildren(el("strong", {}, `${h.group} › ${h.name}`), " ",
    el("span", { class: "loc mono", title: h.loc[0] }, `${shortPath(h.loc[0])}:${h.loc[1]}`), " ",
    el("code", {}, h.code_line), " ", el("span", { class: "loc" }, `${h.match_count} matches`));
}

function updateMatchLabel() {
  const total = rw.header ? rw.header.match_count : 0;
  const have = rw.graphs.length - 1;
  const loading = have < total ? ` (${have + 1} loaded)` : "";
  $("match-label").textContent = `match ${rw.match} / ${total}${loading}`;
}

function showMatch(i) {
  if (!rw.graphs.length) return;
  rw.match = clamp(i, 0, rw.graphs.length - 1);
  $("slider").value = rw.match;
  const msg = rw.graphs[rw.match];
  renderDetails(msg);
  updateMatchLabel();
  if (msg.layout) return drawGraph(msg);
  layOut(msg).then(() => { if (rw.graphs[rw.match] === msg) drawGraph(msg); }); // unless another match is shown now
}

// graphs are laid out off the main thread (layout.js in a worker, one graph at a time in the order asked): a
// 7,000-node graph never freezes the page while it is placed. Each graph's layout is asked for once and kept on it
const layouts = { worker: null, waiting: new Map(), next: 0 };

function startLayoutWorker() { // at page load: the worker has started and read its script when the first graph comes
  layouts.worker = new Worker("layout.js");
  layouts.worker.onmessage = (e) => {
    const { resolve } = layouts.waiting.get(e.data.key);
    layouts.waiting.delete(e.data.key);
    resolve(e.data.layout);
  };
  layouts.worker.onerror = (e) => setStatus(`graph layout failed: ${e.message}`, "rewrites");
}

// another step picked: the graphs still queued for the last one are not worth the wait. The worker is replaced, and
// each abandoned graph forgets its request, so showing it later (from the step cache) asks again
function dropQueuedLayouts() {
  if (!layouts.waiting.size) return;
  layouts.worker.terminate();
  for (const { held } of layouts.waiting.values()) if (held.msg) delete held.msg.layoutReady;
  layouts.waiting.clear();
  startLayoutWorker();
}

// a graph's layout, asked for once: a graph that came as a line was sent as its text (`onStepLine`: posting a
// 7,000-node graph object copies it on this thread first, tens of ms; a string is handed over at once), one shown
// again from the step cache is sent as its object
function layOut(msg) {
  if (!msg.layoutReady) {
    msg.layoutReady = askLayout({ msg }, { graph: msg.graph, order: msg.order }).then((layout) => (msg.layout = layout));
  }
  return msg.layoutReady;
}

// the worker's layout of `payload` ({text} or {graph, order}); `held.msg` is the message it is for, once known
function askLayout(held, payload) {
  if (!layouts.worker) startLayoutWorker();
  const key = layouts.next++;
  const ready = new Promise((resolve) => layouts.waiting.set(key, { resolve, held }));
  layouts.worker.postMessage({ key, ...payload });
  return ready;
}

// a step's graphs share most nodes and edges: each element is made once per step (keyed by everything it shows) and
// kept in place while it stays, so a ←/→ step touches only what the match changed. Level of detail: zoomed out
// (below TEXT_ZOOM, where 12px text is under 4px) a graph is a sketch: its boxes as one path per colour, its edges as
// one path, and elements only for the nodes that stand out (created by the match, found, picked, or linked to a
// kernel); closer, every node is an element and those on screen get their labels, each edge its own path, arrowhead
// and input number (up to layout.js's MERGED_EDGES edges: past that, one path always)
const TEXT_ZOOM = 0.3;

function graphLayers() {
  const root = $("graph");
  if (!$("viewport")) {
    const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7,
      orient: "auto" });
    marker.append(svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#9aa3b5" }));
    const defs = svg("defs");
    defs.append(marker);
    const viewport = svg("g", { id: "viewport" });
    viewport.append(svg("g", { id: "edge-layer" }), svg("g", { id: "sketch-layer" }), svg("g", { id: "node-layer" }));
    root.replaceChildren(defs, viewport);
    rw.shown = new Map(); // key -> element, what the viewport holds now
  }
  return { a: $("edge-layer"), e: $("edge-layer"), i: $("edge-layer"), s: $("sketch-layer"), n: $("node-layer") };
}

// a graph's nodes as {i, id, label, node} (the layout is typed arrays, layout.js: drawn node i is node nodes[i] of the
// message's order, its box boxes[4i .. 4i + 3]); a node's element is made when first drawn, or in idle time
// (`prepareLater`), and kept in rw.nodes by its key (everything it shows) for the step's other graphs. Edge and sketch
// elements likewise, per level of detail (`edgeElements`, `sketchElements`)
function prepareGraph(msg) {
  if (msg.parts && msg.parts.elements === rw.nodes) return msg.parts;
  const L = msg.layout, nodes = [];
  for (let i = 0; i < L.nodes.length; i++) {
    const id = L.nodes[i] < 0 ? "-1" : String(msg.order[L.nodes[i]]), node = msg.graph[id];
    const note = L.notes[i]; // e.g. a repeated subgraph drawn once
    nodes.push({ i, id, node, label: note || (node ? node.label : `${L.hidden} more nodes\n(graph too big to draw)`) });
  }
  return (msg.parts = { elements: rw.nodes, drawn: nodes, edges: {}, sketch: null, boxes: L.boxes });
}

// a node's box and key, made when it is first drawn as an element (a sketch needs neither)
function settle(entry, boxes) {
  if (entry.key) return entry;
  const { i, id, node, label } = entry, box = (entry.box = boxes.subarray(4 * i, 4 * i + 4));
  entry.key = `n|${id}|${box[2]}|${box[3]}|${node ? node.color : ""}|${node ? node.ref : ""}|${label}`;
  return entry;
}

function nodeElement(entry, boxes) {
  const { key, id, box, label, node } = settle(entry, boxes);
  let g = rw.nodes.get(key);
  if (!g) rw.nodes.set(key, (g = makeNode(id, box, node, label)));
  return g;
}

// the nodes that stand out, drawn as elements over a sketch: created by this match, found by the search, picked, or
// a KERNEL node (a click opens its code)
function standsOut({ id, label, node }, changed) {
  return changed.has(id) || id === rw.picked || Boolean(node && node.ref != null) || isFound(label);
}

const isFound = (label) => Boolean(rw.found) && label.toLowerCase().replace(/\n/g, " ").includes(rw.found);

// the edge elements of a graph at one level of detail: "far" one path (made once); "near" one per edge with its
// input number, those whose points come into `area` (layout units; every edge without one), each made once per step
function edgeElements(msg, lod, area = null) {
  const parts = prepareGraph(msg), L = msg.layout;
  if (lod === "far" || L.curves === null) {
    if (!parts.edges.far) {
      const key = `all|${L.path}`;
      parts.edges.far = new Map([[key, rw.nodes.get(key) || svg("path", { class: "edge", d: L.path })]]);
    }
    for (const [key, element] of parts.edges.far) rw.nodes.set(key, element);
    return parts.edges.far;
  }
  const want = new Map(), boxes = edgeBoxes(L);
  for (let e = 0; e < L.curves.length; e++) if (!area || overlaps(boxes, e, area)) addEdge(L, e, want);
  return want;
}

// each edge's bounding box (x0 y0 x1 y1 per edge, from its points), made once per layout
function edgeBoxes(L) {
  if (L.edgeBoxes) return L.edgeBoxes;
  const boxes = (L.edgeBoxes = new Float64Array(4 * (L.pointStart.length - 1)));
  for (let e = 0; e < L.pointStart.length - 1; e++) {
    let [x0, y0, x1, y1] = [Infinity, Infinity, -Infinity, -Infinity];
    for (let q = L.pointStart[e]; q < L.pointStart[e + 1]; q++) {
      [x0, x1] = [Math.min(x0, L.points[2 * q]), Math.max(x1, L.points[2 * q])];
      [y0, y1] = [Math.min(y0, L.points[2 * q + 1]), Math.max(y1, L.points[2 * q + 1])];
    }
    boxes.set([x0, y0, x1, y1], 4 * e);
  }
  return boxes;
}

// box `i` of `boxes` (x0 y0 x1 y1) meets `area`
const overlaps = (boxes, i, area) => boxes[4 * i] <= area.x1 && boxes[4 * i + 2] >= area.x0 && boxes[4 * i + 1] <= area.y1 &&
  boxes[4 * i + 3] >= area.y0;

// the boxes zoomed out: one path per colour, made once
function sketchElements(msg) {
  const parts = prepareGraph(msg);
  if (!parts.sketch) {
    parts.sketch = new Map();
    for (const [color, d] of msg.layout.sketch) {
      const key = `s|${color}|${d}`;
      let path = rw.nodes.get(key);
      if (!path) rw.nodes.set(key, (path = svg("path", { class: "sketch", d, fill: color })));
      parts.sketch.set(key, path);
    }
  }
  return parts.sketch;
}

const lodOf = () => (rw.view.k >= TEXT_ZOOM ? "near" : "far");

// edge e as its own path with an arrowhead, and the input number beside it where its node has several inputs
function addEdge(L, e, want) {
  if (!L.inputs) { // per drawn node, how many edges come into it
    L.inputs = new Int32Array(L.nodes.length);
    for (let k = 2; k < L.edges.length; k += 3) L.inputs[L.edges[k - 1]]++;
  }
  const d = L.curves[e], key = `e|${d}`;
  let path = rw.nodes.get(key);
  if (!path) rw.nodes.set(key, (path = svg("path", { class: "edge", d, "marker-end": "url(#arrow)" })));
  want.set(key, path);
  if (L.inputs[L.edges[3 * e + 1]] < 2) return;
  const end = L.pointStart[e + 1] - 1, x = L.points[2 * end], y = L.points[2 * end + 1], index = L.edges[3 * e + 2];
  const ikey = `i|${x}|${y}|${index}`;
  let text = rw.nodes.get(ikey);
  if (!text) {
    rw.nodes.set(ikey, (text = svg("text", { class: "edge-index", x: x - 12, y: y - 3 })));
    text.textContent = index;
  }
  want.set(ikey, text);
}

// the graphs of the shown step whose layouts are back, their elements made in idle periods (for the level of detail
// shown), nearest the shown match first. A graph is one task: zoomed in, past PREPARE_MAX nodes it would hold up the
// next frame (a 3,000-node graph takes ~100 ms), so such a graph is built when shown
const preparing = { queue: [], handle: 0 }, PREPARE_MAX = 1500;

function prepareLater(msg) {
  preparing.queue.push(msg);
  if (!preparing.handle) preparing.handle = requestIdleCallback(prepareQueued);
}

function prepareQueued(deadline) {
  preparing.handle = 0;
  while (preparing.queue.length && deadline.timeRemaining() > 1) {
    const far = (m) => Math.abs(rw.graphs.indexOf(m) - rw.match); // the shown match's neighbours first: ←/→ go there
    const next = preparing.queue.reduce((best, m, i) => (far(m) < far(preparing.queue[best]) ? i : best), 0);
    const [msg] = preparing.queue.splice(next, 1);
    if (msg.layout && rw.graphs.includes(msg)) prepareElements(msg); // not one of a step left since
  }
  if (preparing.queue.length) preparing.handle = requestIdleCallback(prepareQueued);
}

function prepareElements(msg) {
  const lod = rw.view ? lodOf() : "far", parts = prepareGraph(msg);
  if (lod === "near" && parts.drawn.length > PREPARE_MAX) return;
  edgeElements(msg, lod);
  if (lod === "near") {
    for (const entry of parts.drawn) nodeElement(entry, parts.boxes);
  } else {
    sketchElements(msg);
    const changed = new Set(msg.changed.map(String));
    for (const entry of parts.drawn) if (standsOut(entry, changed)) nodeElement(entry, parts.boxes);
  }
  parts.built = lod;
}

// zoomed in, only the nodes and edges in or near the pane are elements: the pane and CULL_MARGIN of its size on each
// side (`rw.area`); a pan or zoom that shows more than that area draws the graph again
const CULL_MARGIN = 0.5;

function drawGraph(msg) {
  if (!rw.view) rw.view = fitView(msg); // before the elements change: reading the pane's size then lays out nothing
  const layers = graphLayers(); // by the first letter of an element's key
  const { drawn, boxes } = prepareGraph(msg), lod = lodOf(), near = lod === "near";
  rw.area = near ? viewArea(CULL_MARGIN) : null;
  const want = new Map(edgeElements(msg, lod, rw.area)), changed = new Set(msg.changed.map(String));
  if (!near) for (const [key, element] of sketchElements(msg)) want.set(key, element);
  rw.boxes = [];
  const corners = near ? nodeCorners(msg.layout) : null;
  for (const entry of drawn) {
    if (near ? !overlaps(corners, entry.i, rw.area) : !standsOut(entry, changed)) continue;
    const g = nodeElement(entry, boxes), { key, id, box, label } = entry;
    want.set(key, g);
    const at = `translate(${box[0]},${box[1]})`;
    if (g.vizAt !== at) g.setAttribute("transform", (g.vizAt = at));
    g.vizBox = box;
    setClass(g, "changed", changed.has(id));
    setClass(g, "found", isFound(label));
    setClass(g, "picked", id === rw.picked);
    rw.boxes.push(g);
  }
  for (const [key, element] of rw.shown) if (!want.has(key)) element.remove();
  const added = new Map(Object.values(layers).map((layer) => [layer, []])); // one DOM change per layer
  for (const [key, element] of want) if (!rw.shown.has(key)) added.get(layers[key[0]]).push(element);
  for (const [layer, elements] of added) layer.append(...elements);
  Object.assign(rw, { shown: want, drawnMsg: msg, lod });
  applyView();
}

// a class flag kept on the element too: most nodes keep theirs from one match to the next, and the check costs no
// DOM call
function setClass(g, name, on) {
  const flags = g.vizClasses || (g.vizClasses = {});
  if (Boolean(flags[name]) === on) return;
  flags[name] = on;
  g.classList.toggle(name, on);
}

function makeNode(id, box, node, label) {
  const g = svg("g", { class: "node", "data-id": id });
  g.append(svg("rect", { width: box[2], height: box[3], rx: 4, fill: node ? node.color : "#666" }));
  g.vizLabel = label;
  g.vizTitle = node && node.ref != null ? `${label}\n(click: open this kernel's code)` : label;
  if (node && node.ref != null) {
    g.classList.add("linked");
    g.addEventListener("click", () => openGroup(node.ref)); // a KERNEL node: jump to its codegen trace
  }
  return g;
}

// the drawn nodes' boxes as corners (x0 y0 x1 y1), for `overlaps`, made once per layout
function nodeCorners(L) {
  if (!L.corners) {
    L.corners = new Float64Array(L.boxes.length);
    for (let i = 0; i < L.boxes.length; i += 4) {
      L.corners.set([L.boxes[i], L.boxes[i + 1], L.boxes[i] + L.boxes[i + 2], L.boxes[i + 1] + L.boxes[i + 3]], i);
    }
  }
  return L.corners;
}

// the pane's size, read once (and again after a resize): reading it after the graph's elements changed would lay the
// page out at once
function paneSize() {
  if (!rw.pane) rw.pane = { w: $("graph-wrap").clientWidth || 800, h: $("graph-wrap").clientHeight || 600 };
  return rw.pane;
}

// what the pane shows, in layout units, grown by `margin` of its size on each side
function viewArea(margin) {
  const v = rw.view, { w, h } = paneSize(), W = w / v.k, H = h / v.k, x0 = -v.x / v.k, y0 = -v.y / v.k;
  return { x0: x0 - margin * W, y0: y0 - margin * H, x1: x0 + (1 + margin) * W, y1: y0 + (1 + margin) * H };
}

const inside = (a, b) => a.x0 >= b.x0 && a.y0 >= b.y0 && a.x1 <= b.x1 && a.y1 <= b.y1;

// the label of every on-screen node that has none yet, when the view is close enough to read it
function addVisibleText() {
  const v = rw.view;
  if (!v || v.k < TEXT_ZOOM || !rw.boxes) return;
  const { x0, y0, x1, y1 } = viewArea(0);
  for (const g of rw.boxes) {
    const b = g.vizBox;
    if (g.vizText || b[0] > x1 || b[0] + b[2] < x0 || b[1] > y1 || b[1] + b[3] < y0) continue;
    const text = svg("text", { y: PADDING / 2 + 11 });
    g.vizLabel.split("\n").slice(0, LABEL_LINES).forEach((line, i) => {
      const span = svg("tspan", { x: PADDING, dy: i ? LINE_HEIGHT : 0 });
      span.textContent = cut(line);
      text.append(span);
    });
    g.append(text);
    g.vizText = true;
  }
}

// the whole graph, centred in the pane, at the largest scale that shows all of it (never above 1:1)
function fitView(msg) {
  rw.pane = null; // read now, before any element changes
  const { w: W, h: H } = paneSize(), L = msg.layout;
  const k = clamp(Math.min((W - 2 * FIT_MARGIN) / Math.max(L.width, 1), (H - 2 * FIT_MARGIN) / Math.max(L.height, 1)),
    MIN_ZOOM, 1);
  return { k, x: (W - L.width * k) / 2, y: (H - L.height * k) / 2 };
}

function fitGraph() {
  if (!rw.graphs.length || $("graph-wrap").hidden || !rw.graphs[rw.match].layout) return;
  rw.view = fitView(rw.graphs[rw.match]);
  applyView();
}

function applyView() {
  const viewport = $("viewport");
  const v = rw.view, msg = rw.drawnMsg;
  if (viewport && msg && msg === rw.graphs[rw.match]) { // a zoom crossed TEXT_ZOOM, or the view left the drawn area
    if (lodOf() !== rw.lod || (rw.area && !inside(viewArea(0), rw.area))) return drawGraph(msg);
  }
  if (viewport && v) viewport.setAttribute("transform", `translate(${v.x},${v.y}) scale(${v.k})`);
  addVisibleText();
}

function renderDetails(msg) {
  const d = $("details"), trace = callTrace(), parts = [];
  if (msg.nodeCount === undefined) msg.nodeCount = Object.keys(msg.graph).length;
  parts.push(el("h3", {}, msg.i ? `match ${msg.i}` : "input graph"),
    el("div", {}, `${msg.nodeCount} nodes, ${msg.changed.length} created by this match`));
  if (msg.rule) {
    parts.push(el("h3", {}, "rule"),
      el("div", { class: "mono", title: msg.rule.loc[0] }, `${shortPath(msg.rule.loc[0])}:${msg.rule.loc[1]}`),
      el("pre", { class: "mono" }, msg.rule.line));
    if (msg.rule.src.trim() !== msg.rule.line.trim()) parts.push(el("h3", {}, "pattern"), el("pre", {}, msg.rule.src));
  }
  if (msg.diff.length) {
    const pre = el("pre", { class: "diff" });
    for (const line of msg.diff) {
      const kind = line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "";
      pre.append(el("div", { class: kind }, line));
    }
    parts.push(el("h3", {}, "replaced node"), pre);
  }
  if (rw.picked && msg.graph[rw.picked]) parts.push(el("h3", {}, "selected node"), el("pre", {}, msg.graph[rw.picked].label));
  for (const child of [...d.children]) if (child !== trace) child.remove();
  d.prepend(...parts);
  if (trace && trace.parentNode !== d) d.append(trace);
}

// the step's call trace, made once per step and kept in the pane while its matches are shown: a <details> element
// made again each ←/→ cost ~2 ms of style
function callTrace() {
  const h = rw.header;
  if (!h || !h.trace.length) return null;
  if (!h.traceElement) {
    const frames = h.trace.map((f) => el("div", { class: "mono", title: f.file }, `${shortPath(f.file)}:${f.line} ${f.name}`,
      el("br"), `    ${f.code}`));
    h.traceElement = el("details", {}, el("summary", {}, "call trace"), ...frames);
  }
  return h.traceElement;
}

async function showKernel(ctx) {
  if (rw.abort) rw.abort.abort();
  rw.abort = null;
  Object.assign(rw, { ctx, idx: -1 });
  markSelected(`${ctx}:source`);
  showPane("kernel");
  $("step-head").replaceChildren(el("strong", {}, `${rw.groups[ctx].name} › kernel source`));
  const pane = $("kernel-pane");
  pane.replaceChildren(el("span", { class: "empty" }, "loading…"));
  $("details").replaceChildren();
  setStatus("loading kernel source…", "rewrites");
  let k;
  try {
    k = await getJSON(`/kernel?ctx=${ctx}`);
  } catch (e) {
    setStatus(`kernel: ${e}`, "rewrites");
    return;
  }
  if (rw.ctx !== ctx || rw.idx !== -1) return; // another step or kernel was picked meanwhile
  setStatus(`${k.name}: ${k.uops.length} linear UOps`, "rewrites");
  const code = el("pre", { class: "code" });
  if (k.html !== null) code.innerHTML = k.html; // the server's highlighter escaped the source
  else code.textContent = k.src;
  const costs = ["ops", "lds", "mem"].filter((c) => k[c] !== null).map((c) => `${c} ${k[c].toLocaleString()}`).join(" · ");
  const table = el("table", {}, el("tr", {}, ...["#", "op", "dtype", "src", "arg"].map((h) => el("th", {}, h))));
  for (const u of k.uops) table.append(el("tr", {}, ...[u.i, u.op, u.dtype, u.src.join(" "), u.arg].map((c) => el("td", {}, c))));
  pane.replaceChildren(el("h3", {}, `${k.name} on ${k.device}`), el("div", { class: "loc" }, costs), code,
    el("h3", {}, `${k.uops.length} linear UOps`), table);
}

function setupGraphInput() {
  const wrap = $("graph-wrap");
  let drag = null;
  wrap.addEventListener("wheel", (e) => {
    if (!rw.view) return;
    e.preventDefault();
    const r = wrap.getBoundingClientRect(), mx = e.clientX - r.left, my = e.clientY - r.top, v = rw.view;
    const k = clamp(v.k * Math.exp(-e.deltaY * 0.0015), MIN_ZOOM, MAX_ZOOM);
    v.x = mx - ((mx - v.x) * k) / v.k;
    v.y = my - ((my - v.y) * k) / v.k;
    v.k = k;
    applyView();
  }, { passive: false });
  wrap.addEventListener("mousedown", (e) => {
    if (!rw.view || e.button !== 0) return;
    drag = { x: e.clientX, y: e.clientY, vx: rw.view.x, vy: rw.view.y, moved: false };
    wrap.classList.add("dragging");
  });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    drag.moved = drag.moved || Math.abs(e.clientX - drag.x) + Math.abs(e.clientY - drag.y) > 3;
    rw.view.x = drag.vx + e.clientX - drag.x;
    rw.view.y = drag.vy + e.clientY - drag.y;
    applyView();
  });
  window.addEventListener("mouseup", (e) => {
    if (!drag) return;
    const moved = drag.moved;
    drag = null;
    wrap.classList.remove("dragging");
    const node = e.target.closest ? e.target.closest("g.node") : null;
    if (moved || !rw.graphs.length) return;
    rw.picked = node ? node.dataset.id : sketchedNodeAt(e);
    showMatch(rw.match);
  });
  $("slider").addEventListener("input", () => showMatch(Number($("slider").value)));
  window.addEventListener("resize", () => { rw.pane = null; }); // read again when next needed
  wrap.addEventListener("mouseover", (e) => { // a node's tooltip is made when first hovered, not with the node
    const g = e.target.closest ? e.target.closest("g.node") : null;
    if (!g || g.vizTitled) return;
    const title = svg("title");
    title.textContent = g.vizTitle;
    g.prepend(title);
    g.vizTitled = true;
  });
}

// the node under the mouse in a sketch (its boxes are one path per colour: no element says which node it is)
function sketchedNodeAt(e) {
  const msg = rw.drawnMsg;
  if (rw.lod !== "far" || !msg || !e.target.classList || !e.target.classList.contains("sketch")) return null;
  const r = $("graph-wrap").getBoundingClientRect(), v = rw.view, B = msg.layout.boxes;
  const x = (e.clientX - r.left - v.x) / v.k, y = (e.clientY - r.top - v.y) / v.k;
  for (let i = 0; i < msg.layout.nodes.length; i++) {
    if (x >= B[4 * i] && x <= B[4 * i] + B[4 * i + 2] && y >= B[4 * i + 1] && y <= B[4 * i + 1] + B[4 * i + 3]) {
      return msg.parts.drawn[i].id;
    }
  }
  return null;
}

function onKey(e) {
  const t = e.target;
  if (t.tagName === "INPUT" && t.type !== "range") {
    if (e.key === "Escape") $("search-results").hidden = true;
    return;
  }
  if (e.key === "?") return toggleHelp();
  if (e.key === "Escape") return toggleHelp(false);
  if ($("rewrites-view").hidden || e.ctrlKey || e.metaKey || e.altKey) return;
  if (t === $("slider") && (e.key === "ArrowLeft" || e.key === "ArrowRight")) return; // the slider moves itself
  if (e.key === "ArrowRight" || e.key === "ArrowLeft") {
    showMatch(rw.match + (e.key === "ArrowRight" ? 1 : -1));
  } else if (e.key === "ArrowDown" || e.key === "ArrowUp") {
    const steps = allSteps();
    const at = steps.findIndex(([c, i]) => c === rw.ctx && i === rw.idx);
    const next = steps[clamp(at + (e.key === "ArrowDown" ? 1 : -1), 0, steps.length - 1)];
    if (next) selectStep(next[0], next[1], 0);
  } else if (e.key === "f" || e.key === "F") {
    fitGraph();
  } else return;
  e.preventDefault();
}

// *** search over the whole rewrite history ***

let searchTimer = 0;

async function runSearch() {
  const query = $("search").value.trim();
  const box = $("search-results");
  if (!query) {
    box.hidden = true;
    return;
  }
  const hits = await getJSON(`/search?q=${encodeURIComponent(query)}`);
  const rows = hits.map((h) => el("div", { onclick: () => openHit(h, query) }, h.text, el("br"),
    el("small", {}, `${h.group} › ${h.step} · ${h.match ? `created by match ${h.match}` : "in the step's input"}`)));
  box.replaceChildren(...(rows.length ? rows : [el("div", {}, "no node matches")]));
  box.hidden = false;
}

function openHit(hit, query) {
  $("search-results").hidden = true;
  showTab("rewrites");
  selectStep(hit.ctx, hit.idx, hit.match, query.toLowerCase());
}

// *** profiler: decoding /get_profile (layout in fusegrad/viz/profile.py) ***

const prof = { started: false, ready: false, dur: 0, peak: 0, strings: [], markers: [], tracks: [], rows: [], info: null,
  users: new Map(), t0: 0, t1: 1, selected: null, drawMs: 0, pending: false, colors: [], texts: [], stats: null,
  sort: { key: "total_us", down: true }, highlight: -1 };
const LABEL_W = 160, AXIS_H = 36, ROW_H = 18, MEM_H = 70, MAX_LEVELS = 12, MAX_SEGMENTS = 400000;
const RIGHT_PAD = 12; // the run's end sits this far left of the edge, so a marker there (and its line) stays visible

function decodeProfile(buffer) {
  const view = new DataView(buffer);
  let o = 0;
  const u8 = () => view.getUint8(o++);
  const u32 = () => { o += 4; return view.getUint32(o - 4, true); };
  const f32 = () => { o += 4; return view.getFloat32(o - 4, true); };
  const u64 = () => { o += 8; return Number(view.getBigUint64(o - 8, true)); };
  const text = (n) => { o += n; return new TextDecoder().decode(new Uint8Array(buffer, o - n, n)); };
  prof.dur = u32();
  prof.peak = u64();
  const indexLen = u32(), trackCount = u32();
  const index = JSON.parse(text(indexLen));
  prof.strings = index.strings;
  prof.markers = index.markers;
  prof.tracks = [];
  for (let t = 0; t < trackCount; t++) {
    const name = text(u8());
    const kind = u8(), count = u32();
    if (kind === 0) prof.tracks.push(readRangeTrack(name, count, u32, f32));
    else prof.tracks.push(readMemoryTrack(name, count, u8, u32, u64, index.dtypes));
  }
}

function readRangeTrack(name, n, u32, f32) {
  const tr = { kind: "range", name, n, nameIdx: new Uint32Array(n), ref: new Int32Array(n), st: new Float64Array(n),
    dur: new Float32Array(n), occ: new Uint32Array(n), level: new Uint8Array(n), levels: 1, maxDur: 0 };
  const seen = new Map();
  for (let i = 0; i < n; i++) {
    tr.nameIdx[i] = u32();
    tr.ref[i] = u32() - 1; // 0 means no program, else 1 + its group
    u32(); // key: 1 + the kind of range
    tr.st[i] = u32();
    tr.dur[i] = f32();
    u32(); // spare
    tr.occ[i] = seen.get(tr.nameIdx[i]) || 0;
    seen.set(tr.nameIdx[i], tr.occ[i] + 1);
    tr.maxDur = Math.max(tr.maxDur, tr.dur[i]);
  }
  tr.order = Uint32Array.from({ length: n }, (_, i) => i).sort((a, b) => tr.st[a] - tr.st[b]);
  tr.stSorted = Float64Array.from(tr.order, (i) => tr.st[i]);
  const ends = []; // per level, when its last range ends: overlapping ranges stack like a flame graph
  for (const i of tr.order) {
    let lv = ends.findIndex((end) => end <= tr.st[i]);
    if (lv < 0) lv = ends.length < MAX_LEVELS ? ends.push(0) - 1 : MAX_LEVELS - 1;
    ends[lv] = tr.st[i] + tr.dur[i];
    tr.level[i] = lv;
  }
  tr.levels = Math.max(ends.length, 1);
  return tr;
}

// buffers as stacked bands: each keeps its place until a buffer below it is freed (segments: t0 t1 offset buffer)
function readMemoryTrack(name, n, u8, u32, u64, dtypes) {
  const device = name.replace(/ Memory$/, "");
  const tr = { kind: "memory", name, device, peak: u64(), buffers: [], segs: [], usage: [], bands: true };
  const live = [];
  let used = 0;
  const closeFrom = (i, ts, shift) => {
    for (let j = i; j < live.length; j++) {
      const b = live[j];
      if (tr.segs.length < MAX_SEGMENTS * 4) tr.segs.push(b.since, ts, b.offset, b.index);
      else tr.bands = false;
      b.since = ts;
      b.offset -= shift;
    }
  };
  for (let e = 0; e < n; e++) {
    const alloc = u8(), ts = u32(), key = u32();
    if (alloc) {
      const dtype = prof.strings[u32()], sz = u64();
      const b = { index: tr.buffers.length, key, dtype, sz, bytes: sz * (dtypes[dtype] || 1), t0: ts, t1: ts, users: [],
        since: ts, offset: used };
      tr.buffers.push(b);
      live.push(b);
      used += b.bytes;
    } else {
      const users = [];
      for (let u = u32(); u > 0; u--) users.push([u32(), u32(), u8(), u8()]);
      const at = live.findIndex((b) => b.key === key);
      if (at < 0) continue;
      const b = live[at];
      b.t1 = ts;
      b.users = users;
      for (const [run, , pos, mode] of users) {
        const k = `${device}|${run}`;
        if (!prof.users.has(k)) prof.users.set(k, []);
        prof.users.get(k).push({ track: tr, buffer: b, pos, mode });
      }
      closeFrom(at, ts, 0);
      live.splice(at, 1);
      closeFrom(at, ts, b.bytes);
      used -= b.bytes;
    }
    tr.usage.push([ts, used]);
  }
  return tr;
}

async function openProfiler() {
  if (prof.started) return;
  prof.started = true;
  setStatus("loading profile…", "profiler");
  const full = Promise.all([fetch("/get_profile").then((r) => r.arrayBuffer()), getJSON("/profile_info")]);
  full.catch(() => {}); // its error is reported below, once the overview is drawn
  try { // the overview and the kernel table come from the file's columns: they need not wait for every event
    const bins = Math.max(Math.floor(($("timeline-wrap").clientWidth || 1200) - LABEL_W - RIGHT_PAD), 100);
    const stats = getJSON("/kernel_stats");
    stats.catch(() => {}); // reported below, after the overview is drawn
    const overview = await getJSON(`/timeline_overview?bins=${bins}`);
    if (!prof.ready && overview.tracks.length) drawOverview(overview); // painted now: the table may take longer
    prof.stats = await stats;
    if (!prof.ready && overview.tracks.length) showKernelTable();
  } catch (e) {
    setStatus(`profile overview: ${e}`, "profiler");
  }
  try {
    const [buffer, info] = await full;
    decodeProfile(buffer);
    prof.info = info;
    prof.runsByName = {}; // device -> kernel name -> its run numbers, in order
    for (const [device, names] of Object.entries(info.runs)) {
      const byName = (prof.runsByName[device] = {});
      names.forEach((name, run) => (byName[name] = byName[name] || []).push(run));
    }
    prof.t0 = 0;
    prof.t1 = Math.max(prof.dur, 1);
    if (!prof.tracks.length && !prof.markers.length) return showNoProfile();
    prof.ready = true;
    const events = prof.tracks.reduce((n, t) => n + (t.kind === "range" ? t.n : 0), 0);
    setStatus(`${events} events on ${prof.tracks.length} tracks, ${fmtUs(prof.dur)}`, "profiler");
    layoutRows();
    showKernelTable();
  } catch (e) {
    setStatus(`profile: ${e}`, "profiler");
  }
}

// the whole run at once, before its events arrive: per track and pixel column how busy it is, in the colour of its
// longest kernel there (the server's /timeline_overview); replaced by the full timeline when that is decoded
function drawOverview(ov) {
  prof.t0 = 0;
  prof.t1 = Math.max(ov.duration_us, 1);
  prof.height = AXIS_H + ov.tracks.length * (ROW_H + 6) + 10;
  const canvas = $("timeline"), wrap = $("timeline-wrap"), dpr = window.devicePixelRatio || 1;
  prof.width = Math.max(wrap.clientWidth, 300);
  canvas.width = prof.width * dpr;
  canvas.height = prof.height * dpr;
  canvas.style.width = `${prof.width}px`;
  canvas.style.height = `${prof.height}px`;
  const ctx = canvas.getContext("2d"), bw = (prof.width - LABEL_W - RIGHT_PAD) / ov.bins;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, prof.width, prof.height);
  ctx.font = "11px sans-serif";
  ctx.textBaseline = "middle";
  prof.texts = [];
  ov.tracks.forEach((track, i) => {
    const y = AXIS_H + i * (ROW_H + 6);
    ctx.fillStyle = i % 2 ? "#1b1e24" : "#1f232a";
    ctx.fillRect(0, y, prof.width, ROW_H + 6);
    for (let b = 0; b < ov.bins; b++) {
      if (!track.busy[b]) continue;
      ctx.globalAlpha = 0.35 + 0.65 * track.busy[b];
      ctx.fillStyle = track.top[b] >= 0 ? colorOfName(ov.strings[track.top[b]]) : "#888";
      ctx.fillRect(LABEL_W + b * bw, y + 3, Math.max(bw, 1), ROW_H - 2);
    }
    ctx.globalAlpha = 1;
    ctx.fillStyle = "#d8dce4";
    ctx.fillText(track.name, 8, y + 12, LABEL_W - 12);
  });
  drawAxis(ctx);
  prof.painted = true;
  const tracks = `${ov.tracks.length} track${ov.tracks.length === 1 ? "" : "s"}`;
  setStatus(`overview of ${tracks}, ${fmtUs(ov.duration_us)}; loading every event…`, "profiler");
}

function showNoProfile() {
  $("timeline").hidden = true;
  $("no-profile").hidden = false;
  $("profile-details").replaceChildren(el("span", { class: "empty" }, "No profile loaded."));
  setStatus("no profile loaded", "profiler");
}

function layoutRows() {
  let y = AXIS_H;
  prof.rows = prof.tracks.map((track) => {
    const h = track.kind === "range" ? track.levels * ROW_H + 6 : MEM_H;
    const row = { track, y, h };
    y += h;
    return row;
  });
  prof.height = y + 10;
  resizeCanvas();
}

function resizeCanvas() {
  tiles.reset(); // rows or width changed
  const canvas = $("timeline"), wrap = $("timeline-wrap"), dpr = window.devicePixelRatio || 1;
  prof.width = Math.max(wrap.clientWidth, 300);
  canvas.width = prof.width * dpr;
  canvas.height = (prof.height || 100) * dpr;
  canvas.style.width = `${prof.width}px`;
  canvas.style.height = `${prof.height || 100}px`;
  scheduleDraw();
}

// *** profiler: drawing ***

// a frame's time to make missing tiles (tiles.js): with the rest of the frame (labels, the browser's paint and
// commit) it stays under the 16.7 ms of a 60 Hz frame; the tiles it has no time for come in the next frames
const FRAME_BUDGET_MS = 4;

function scheduleDraw() {
  if (prof.pending || !prof.ready) return;
  prof.pending = true;
  requestAnimationFrame(() => { prof.pending = false; draw(FRAME_BUDGET_MS); });
}

const scaleOf = () => (prof.width - LABEL_W - RIGHT_PAD) / (prof.t1 - prof.t0);
const xOf = (t) => LABEL_W + (t - prof.t0) * scaleOf();
const tOf = (x) => prof.t0 + (x - LABEL_W) / scaleOf();

function colorOfName(name) {
  let h = 0;
  for (const c of name || "") h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return `hsl(${Math.round((h * 137.508) % 360)},55%,62%)`; // golden angle: near names differ
}

function colorOf(nameIdx) {
  if (!prof.colors[nameIdx]) prof.colors[nameIdx] = colorOfName(prof.strings[nameIdx]);
  return prof.colors[nameIdx];
}

function lowerBound(sorted, value) {
  let lo = 0, hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (sorted[mid] < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// a frame: rows and their names, the content from tiles (tiles.js; `budget` ms to make missing ones, the rest in the
// frames after), and over it the range labels, the selection, markers and the axis, drawn each frame
function draw(budget = Infinity) {
  const start = performance.now();
  const ctx = $("timeline").getContext("2d"), dpr = window.devicePixelRatio || 1;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, prof.width, prof.height);
  ctx.font = "11px sans-serif";
  ctx.textBaseline = "middle";
  prof.texts = [];
  prof.rows.forEach((row, i) => {
    ctx.fillStyle = i % 2 ? "#1b1e24" : "#1f232a";
    ctx.fillRect(0, row.y, prof.width, row.h);
  });
  const view = { t0: prof.t0, scale: scaleOf(), left: LABEL_W, width: prof.width - LABEL_W, height: prof.height, dpr,
    key: contentKey() };
  prof.settled = tiles.frame(ctx, view, budget);
  ctx.save();
  ctx.beginPath();
  ctx.rect(LABEL_W, 0, prof.width - LABEL_W, prof.height);
  ctx.clip();
  for (const row of prof.rows) if (row.track.kind === "range") drawRangeText(ctx, row);
  drawMarkerNames(ctx);
  ctx.restore();
  drawAxis(ctx);
  for (const row of prof.rows) {
    ctx.fillStyle = "#d8dce4";
    ctx.fillText(row.track.name, 8, row.y + Math.min(row.h / 2, 12), LABEL_W - 12);
    if (row.track.kind !== "memory") continue;
    ctx.fillStyle = "#8a92a3";
    ctx.fillText(`peak ${fmtBytes(row.track.peak)}`, 8, row.y + 28, LABEL_W - 12);
  }
  prof.drawMs = performance.now() - start;
  prof.painted = true;
  if (prof.settled) tiles.prefetchLater();
  else scheduleDraw(); // the tiles still missing, in the next frame
}

// what the tiles show besides the events: the highlighted kernel and the selected buffer (a change redraws them)
function contentKey() {
  const s = prof.selected;
  return `${prof.highlight}|${s && s.buffer ? `${s.track.name}|${s.buffer.index}` : ""}`;
}

// one tile: row backgrounds, ranges and memory from time t0 to t1, x = 0 at t0, `width` px wide
function drawContent(ctx, t0, t1, scale, width) {
  const v = { t0, t1, scale, left: 0, width };
  prof.rows.forEach((row, i) => {
    ctx.fillStyle = i % 2 ? "#1b1e24" : "#1f232a";
    ctx.fillRect(0, row.y, width, row.h);
  });
  for (const row of prof.rows) (row.track.kind === "range" ? drawRanges : drawMemory)(ctx, row, v);
  drawMarkerLines(ctx, t0 - 2 / scale, t1 + 2 / scale, scale, -2); // a line on the edge shows in both tiles
}

const tiles = new TimelineTiles(drawContent);

// ranges on whole device pixels: a pixel column shows the first range (by start) that covers it, and a tile shows
// what the same columns of any other tile at this scale would. After a range is painted, the next one drawn is the
// first that reaches past it (a binary search): zoomed out, 100,000 ranges under a few hundred columns cost about as
// many steps as columns, not ranges
function drawRanges(ctx, row, v) {
  const tr = row.track, { t0, t1, scale, left: x0 } = v, dpr = window.devicePixelRatio || 1, unit = scale * dpr;
  const xd = x0 * dpr;
  byLevel(tr).forEach(({ index, start, reach }, lv) => {
    let painted = -Infinity; // the device pixel column painted up to
    for (let j = lowerBound(reach, t0); j < index.length && start[j] <= t1;) {
      const i = index[j], en = start[j] + tr.dur[i], c0 = Math.floor(xd + (start[j] - t0) * unit);
      const c1 = Math.max(Math.ceil(xd + (en - t0) * unit), c0 + 1);
      if (en < t0 || c1 <= painted) { // before the tile, or every column it covers is painted already
        j++;
        continue;
      }
      const left = Math.max(c0, painted);
      painted = c1;
      ctx.fillStyle = prof.highlight < 0 || prof.highlight === tr.nameIdx[i] ? colorOf(tr.nameIdx[i]) : "#3a3f4a";
      ctx.fillRect(left / dpr, row.y + 3 + lv * ROW_H, (c1 - left) / dpr, ROW_H - 2);
      j = Math.max(j + 1, lowerBound(reach, t0 + (painted - xd) / unit));
    }
  });
}

// a range track's events per level, by start: their indices, starts, and how far the ranges up to each one reach
// (the largest end so far: ends grow along a level, except on the last level, where ranges past MAX_LEVELS overlap)
function byLevel(tr) {
  if (tr.byLevel) return tr.byLevel;
  const counts = new Uint32Array(tr.levels);
  for (let i = 0; i < tr.n; i++) counts[tr.level[i]]++;
  const levels = [...counts].map((n) => ({ index: new Uint32Array(n), start: new Float64Array(n), reach: new Float64Array(n), n: 0 }));
  for (const i of tr.order) {
    const L = levels[tr.level[i]], k = L.n++;
    [L.index[k], L.start[k]] = [i, tr.st[i]];
    L.reach[k] = Math.max(k ? L.reach[k - 1] : -Infinity, tr.st[i] + tr.dur[i]);
  }
  return (tr.byLevel = levels);
}

// the names of the ranges in view wide enough for three letters, and the selected range's outline. Candidates come
// from the ranges in view or from those long enough at this scale (byLength), whichever are fewer: zoomed out, few
// ranges are long enough, zoomed in, few are in view
function drawRangeText(ctx, row) {
  const tr = row.track, t0 = prof.t0, t1 = prof.t1, scale = scaleOf(), minDur = (3 * 6.2 + 6) / scale;
  const j0 = lowerBound(tr.stSorted, t0 - tr.maxDur), j1 = lowerBound(tr.stSorted, t1 + 1e-9);
  const long = byLength(tr), last = long.starts.length - 1;
  let b = clamp(lengthClass(minDur) - long.low, 0, last);
  if (b < last && long.max[b] < minDur) b++; // the class minDur falls in has none long enough
  const fromLong = long.starts[last] - long.starts[b] < j1 - j0;
  const count = fromLong ? tr.n - long.starts[b] : j1 - j0;
  ctx.fillStyle = "#111";
  for (let c = 0; c < count; c++) {
    const i = fromLong ? long.order[long.starts[b] + c] : tr.order[j0 + c], st = tr.st[i], en = st + tr.dur[i];
    if (tr.dur[i] < minDur || st >= t1 || en < t0) continue;
    const left = Math.max(xOf(st), LABEL_W), chars = Math.floor((xOf(en) - left - 6) / 6.2);
    if (chars < 3) continue;
    const name = prof.strings[tr.nameIdx[i]], text = name.length > chars ? name.slice(0, chars - 1) + "…" : name;
    ctx.fillText(text, left + 3, row.y + 3 + tr.level[i] * ROW_H + ROW_H / 2 - 1);
    prof.texts.push({ kind: "range", text, x0: left + 3, x1: left + 3 + 6.2 * text.length });
  }
  const sel = prof.selected;
  if (!sel || sel.track !== tr || sel.buffer) return;
  const x = xOf(tr.st[sel.i]), x2 = Math.max(xOf(tr.st[sel.i] + tr.dur[sel.i]), x + 1);
  ctx.strokeStyle = "#fff";
  ctx.lineWidth = 2;
  ctx.strokeRect(x, row.y + 3 + tr.level[sel.i] * ROW_H, x2 - x, ROW_H - 2);
}

// a range track's events by length, in quarter-octave classes: long.order lists them shortest class first,
// long.starts[b] is where class low + b begins (the last entry is n) and long.max[b] its longest, so "every range at
// least this long" is a suffix, give or take the class the length falls in
const lengthClass = (dur) => Math.floor(4 * Math.log2(Math.max(dur, 1e-30)));

function byLength(tr) {
  if (tr.byLength) return tr.byLength;
  const cls = new Int16Array(tr.n);
  let low = 0, high = 0;
  for (let i = 0; i < tr.n; i++) {
    cls[i] = lengthClass(tr.dur[i]);
    if (i === 0 || cls[i] < low) low = cls[i];
    if (i === 0 || cls[i] > high) high = cls[i];
  }
  const starts = new Uint32Array(high - low + 2), order = new Uint32Array(tr.n), max = new Float64Array(high - low + 1);
  for (let i = 0; i < tr.n; i++) {
    starts[cls[i] - low + 1]++;
    max[cls[i] - low] = Math.max(max[cls[i] - low], tr.dur[i]);
  }
  for (let b = 1; b < starts.length; b++) starts[b] += starts[b - 1];
  const next = starts.slice(0, -1);
  for (let i = 0; i < tr.n; i++) order[next[cls[i] - low]++] = i;
  return (tr.byLength = { low, starts, order, max });
}

function drawMemory(ctx, row, v) {
  const tr = row.track, yScale = (row.h - 6) / Math.max(tr.peak, 1), base = row.y + row.h - 3;
  if (tr.bands) drawBands(ctx, row, yScale, base, v);
  ctx.strokeStyle = "#e6e6e6"; // bytes in use, as a step line over the bands
  ctx.lineWidth = 1;
  ctx.beginPath();
  if (!tr.usageAt || tr.usageAt.length !== tr.usage.length) { // as typed arrays, made once
    [tr.usageAt, tr.usageBytes] = [Float64Array.from(tr.usage, (u) => u[0]), Float64Array.from(tr.usage, (u) => u[1])];
  }
  // the changes within one pixel column (a whole run has thousands per column) drawn as one line from the lowest to
  // the highest they reached; only the changes in [t0, t1] and the one before (the level the line starts at)
  const u0 = Math.max(lowerBound(tr.usageAt, v.t0) - 1, 0), xAt = (t) => v.left + (t - v.t0) * v.scale;
  let last = u0 < tr.usageAt.length && tr.usageAt[u0] < v.t0 ? base - tr.usageBytes[u0] * yScale : base;
  let column = NaN, low = last, high = last;
  ctx.moveTo(v.left - 1, last);
  const closeColumn = () => {
    if (low === high) return;
    ctx.lineTo(column, low);
    ctx.lineTo(column, high);
    ctx.lineTo(column, last);
  };
  for (let u = u0; u < tr.usageAt.length && tr.usageAt[u] <= v.t1; u++) {
    if (tr.usageAt[u] < v.t0) continue;
    const x = xAt(tr.usageAt[u]), y = base - tr.usageBytes[u] * yScale;
    if (Math.round(x) === column) {
      [low, high] = [Math.min(low, y), Math.max(high, y)];
    } else {
      closeColumn();
      ctx.lineTo(x, last);
      ctx.lineTo(x, y);
      [column, low, high] = [Math.round(x), Math.min(last, y), Math.max(last, y)];
    }
    last = y;
  }
  closeColumn();
  ctx.lineTo(v.left + v.width + 1, last);
  ctx.stroke();
}

// each buffer's lifetime as a band at its offset, painted as the pixels of an image drawn once: zoomed out, most of a
// run's bands are under a pixel wide (a whole GPT run has ~60,000), and a fill each took 150-300 ms a frame. A pixel
// shows the last band painted on it; the selected buffer's bands are painted last
function drawBands(ctx, row, yScale, base, v) {
  const tr = row.track, dpr = window.devicePixelRatio || 1;
  const W = Math.ceil(v.width * dpr), H = Math.ceil(row.h * dpr);
  if (W <= 0 || H <= 0) return;
  if (!tr.packed || tr.packed.n !== tr.segs.length / 4) tr.packed = packBands(tr);
  if (!prof.bandImage || prof.bandImage.width !== W || prof.bandImage.height !== H) prof.bandImage = new ImageData(W, H);
  const P = tr.packed, image = prof.bandImage, pixels = new Uint32Array(image.data.buffer), picked = [];
  pixels.fill(0);
  const xScale = v.scale * dpr, yUnit = yScale * dpr, yBase = (base - row.y) * dpr, t0 = v.t0, t1 = v.t1;
  const paint = (k, color) => {
    const x = (P.start[k] - t0) * xScale, x2 = (P.end[k] - t0) * xScale, y = yBase - P.top[k] * yUnit;
    const c0 = Math.max(Math.floor(x), 0), c1 = Math.min(Math.max(Math.round(x2), c0 + 1), W);
    const r0 = Math.max(Math.floor(y), 0), r1 = Math.min(Math.max(Math.round(y + P.bytes[k] * yUnit), r0 + 1), H);
    if (c1 - c0 > 2) for (let r = r0; r < r1; r++) pixels.fill(color, r * W + c0, r * W + c1);
    else for (let r = r0, at = r0 * W; r < r1; r++, at += W) for (let c = c0; c < c1; c++) pixels[at + c] = color; // zoomed out most bands are a column or two: a call per row costs more
  };
  const mine = prof.selected && prof.selected.track === tr && prof.selected.buffer;
  const chosen = mine ? prof.selected.buffer.index : -1;
  for (let k = 0; k < P.n; k++) {
    if (P.end[k] < t0 || P.start[k] > t1) continue;
    if (P.buffer[k] === chosen) picked.push(k);
    else paint(k, P.color[k]);
  }
  for (const k of picked) paint(k, 0xffffffff);
  const canvas = prof.bandCanvas || (prof.bandCanvas = document.createElement("canvas"));
  if (canvas.width !== W || canvas.height !== H) [canvas.width, canvas.height] = [W, H]; // a resize clears it: only then
  canvas.getContext("2d").putImageData(image, 0, 0);
  ctx.drawImage(canvas, v.left, row.y, W / dpr, H / dpr);
}

// a memory track's bands as typed arrays (start, end, top = offset + bytes, bytes, colour, buffer), made once: a
// frame then reads no buffer objects
function packBands(tr) {
  const n = tr.segs.length / 4, segs = tr.segs;
  const P = { n, start: new Float64Array(n), end: new Float64Array(n), top: new Float64Array(n),
    bytes: new Float64Array(n), color: new Uint32Array(n), buffer: new Int32Array(n) };
  for (let k = 0; k < n; k++) {
    const b = tr.buffers[segs[4 * k + 3]];
    [P.start[k], P.end[k], P.top[k], P.bytes[k]] = [segs[4 * k], segs[4 * k + 1], segs[4 * k + 2] + b.bytes, b.bytes];
    [P.color[k], P.buffer[k]] = [bandColor(b.key), b.index];
  }
  return P;
}

// a buffer's colour, hsl(key * 47 mod 360, 45%, 50%), as a pixel (RGBA bytes in memory order, opaque)
const bandColors = new Map();
function bandColor(key) {
  const hue = (key * 47) % 360;
  if (!bandColors.has(hue)) {
    const c = 0.45, x = c * (1 - Math.abs(((hue / 60) % 2) - 1)), m = 0.5 - c / 2;
    const [r, g, b] = [[c, x, 0], [x, c, 0], [0, c, x], [0, x, c], [x, 0, c], [c, 0, x]][Math.floor(hue / 60)];
    const byte = (v) => Math.round((v + m) * 255);
    bandColors.set(hue, ((255 << 24) | (byte(b) << 16) | (byte(g) << 8) | byte(r)) >>> 0);
  }
  return bandColors.get(hue);
}

// the markers' times, in order (the markers are sorted by time once)
function markerTimes() {
  if (!prof.markerTs || prof.markerTs.length !== prof.markers.length) {
    prof.markers.sort((a, b) => a.ts - b.ts);
    prof.markerTs = Float64Array.from(prof.markers, (m) => m.ts);
  }
  return prof.markerTs;
}

// the markers' dashed lines from time t0 to t1 (x = x0 at t0), drawn in the tiles: a run marking each step has
// thousands, and drawn each frame they cost ~2 ms to record and more to paint
function drawMarkerLines(ctx, t0, t1, scale, x0) {
  const ts = markerTimes();
  ctx.setLineDash([4, 3]);
  ctx.lineWidth = 1;
  for (let m = lowerBound(ts, t0); m < ts.length && ts[m] <= t1; m++) {
    const mark = prof.markers[m], x = x0 + (ts[m] - t0) * scale;
    ctx.strokeStyle = mark.color && mark.color !== "gray" ? mark.color : "#b0b0b0";
    ctx.beginPath();
    ctx.moveTo(x, AXIS_H - 12);
    ctx.lineTo(x, prof.height);
    ctx.stroke();
  }
  ctx.setLineDash([]);
}

// the names of the markers in view, over the tiles: from the right, each that fits left of the one drawn after it
// (the last marker's name always shows; zoomed out, the others do not pile up)
function drawMarkerNames(ctx) {
  const ts = markerTimes(), names = [];
  let edge = Infinity; // the left end of the name drawn last
  ctx.fillStyle = "#ffd27f";
  for (let m = lowerBound(ts, tOf(prof.width) + 1e-9) - 1; m >= 0 && ts[m] >= tOf(LABEL_W); m--) {
    const mark = prof.markers[m], x = xOf(ts[m]);
    if (mark.textWidth === undefined) mark.textWidth = ctx.measureText(mark.name).width;
    const w = mark.textWidth, left = x + 3 + w <= prof.width ? x + 3 : Math.max(x - 3 - w, LABEL_W);
    if (left + w + 4 > edge) continue;
    ctx.fillText(mark.name, left, AXIS_H - 10);
    names.push({ kind: "marker", text: mark.name, x0: left, x1: left + w });
    edge = left;
  }
  prof.texts.push(...names.reverse());
}

// text right of the line at x, or left of it where the right would run past the canvas; kept for vizProbe.texts()
function fillTextBeside(ctx, text, x, y, kind) {
  const w = ctx.measureText(text).width;
  const left = x + 3 + w <= prof.width ? x + 3 : Math.max(x - 3 - w, LABEL_W);
  ctx.fillText(text, left, y);
  prof.texts.push({ kind, text, x0: left, x1: left + w });
}

function drawAxis(ctx) {
  const span = prof.t1 - prof.t0, target = span / Math.max((prof.width - LABEL_W - RIGHT_PAD) / 110, 1);
  const pow = 10 ** Math.floor(Math.log10(target));
  const step = [1, 2, 5, 10].map((m) => m * pow).find((s) => s >= target);
  ctx.fillStyle = "#8a92a3";
  ctx.strokeStyle = "#333844";
  for (let t = Math.ceil(prof.t0 / step) * step; t <= prof.t1; t += step) {
    const x = xOf(t);
    ctx.fillRect(x, 2, 1, 12);
    fillTextBeside(ctx, fmtUs(t), x, 8, "axis");
  }
}

// *** profiler: interaction ***

function hitTest(mx, my) {
  const row = prof.rows.find((r) => my >= r.y && my < r.y + r.h);
  if (!row || mx < LABEL_W) return null;
  const tr = row.track, t = tOf(mx), tol = 3 / scaleOf();
  if (tr.kind === "range") {
    const lv = Math.floor((my - row.y - 3) / ROW_H);
    let best = null;
    for (let j = lowerBound(tr.stSorted, t - tr.maxDur - tol); j < tr.n && tr.stSorted[j] <= t + tol; j++) {
      const i = tr.order[j];
      if (tr.level[i] !== lv || t > tr.st[i] + tr.dur[i] + tol) continue;
      if (best === null || Math.abs(tr.st[i] - t) < Math.abs(tr.st[best] - t)) best = i;
    }
    return best === null ? null : { track: tr, i: best };
  }
  const bytes = (row.y + row.h - 3 - my) / ((row.h - 6) / Math.max(tr.peak, 1));
  for (let s = 0; s < tr.segs.length; s += 4) {
    const b = tr.buffers[tr.segs[s + 3]], off = tr.segs[s + 2];
    if (tr.segs[s] <= t && t <= tr.segs[s + 1] && off <= bytes && bytes <= off + b.bytes) return { track: tr, buffer: b };
  }
  return null;
}

function kernelRun(tr, i) {
  const name = prof.strings[tr.nameIdx[i]];
  const runs = (prof.runsByName[tr.name] || {})[name];
  return runs ? runs[tr.occ[i]] : undefined;
}

function showEvent(hit) {
  prof.selected = hit;
  scheduleDraw();
  const box = $("profile-details");
  if (hit.buffer) return showBuffer(hit.track, hit.buffer);
  const tr = hit.track, i = hit.i, name = prof.strings[tr.nameIdx[i]], dur = tr.dur[i];
  const info = prof.info.kernels[name] || {};
  const rows = [["kernel", name], ["device", tr.name], ["start", fmtUs(tr.st[i])], ["duration", fmtUs(dur)]];
  if (info.ops && dur > 0) rows.push(["GFLOPS", (info.ops / dur / 1e3).toFixed(3)]);
  if (info.mem && dur > 0) rows.push(["GB/s", (info.mem / dur / 1e3).toFixed(3)]);
  const table = el("table", {}, ...rows.map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", { class: "mono" }, v))));
  const users = prof.users.get(`${tr.name}|${kernelRun(tr, i)}`) || [];
  const bufs = users.map((u) => el("div", { class: "link mono", onclick: () => showEvent({ track: u.track, buffer: u.buffer }) },
    `arg ${u.pos}: buffer ${u.buffer.key} ${u.buffer.dtype}[${u.buffer.sz}] ${fmtBytes(u.buffer.bytes)} (${MODES[u.mode]})`));
  const parts = [backToKernels(), table, el("h4", {}, bufs.length ? "buffers" : "no buffer records"), ...bufs];
  if (tr.ref[i] >= 0) parts.push(el("div", { class: "link", onclick: () => openGroup(tr.ref[i]) }, "→ view its rewrites and source"));
  box.replaceChildren(...parts);
}

function showBuffer(tr, b) {
  const rows = [["buffer", `${b.key} on ${tr.device}`], ["dtype × size", `${b.dtype} × ${b.sz}`], ["bytes", fmtBytes(b.bytes)],
    ["allocated", fmtUs(b.t0)], ["freed", fmtUs(b.t1)]];
  const table = el("table", {}, ...rows.map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", { class: "mono" }, v))));
  const runs = prof.info.runs[tr.device] || [];
  const users = b.users.map(([run, nameIdx, pos, mode]) => el("div", { class: "link mono", onclick: () => jumpToRun(tr.device, run) },
    `run ${run}: ${prof.strings[nameIdx] || runs[run]} arg ${pos} (${MODES[mode]})`));
  $("profile-details").replaceChildren(backToKernels(), table, el("h4", {}, users.length ? "used by" : "no kernel used it"),
    ...users);
}

// *** profiler: the whole run, per kernel name (sortable), and the step times ***

const KERNEL_COLUMNS = [["name", "kernel"], ["runs", "runs"], ["total_us", "total"], ["mean_us", "mean"],
  ["gflops", "GFLOP/s"], ["gbs", "GB/s"]];

function backToKernels() {
  return el("div", { class: "link", onclick: () => { prof.highlight = -1; prof.selected = null; scheduleDraw(); showKernelTable(); } },
    "← all kernels");
}

function cellText(key, v) {
  if (v === null || v === undefined) return "–";
  if (key === "total_us" || key === "mean_us") return fmtUs(v);
  if (key === "gflops" || key === "gbs") return v.toFixed(2);
  return String(v);
}

function showKernelTable() {
  if (!prof.stats) return;
  const { key, down } = prof.sort;
  const rows = [...prof.stats.kernels].sort((a, b) => {
    const x = a[key] ?? -Infinity, y = b[key] ?? -Infinity;
    return (x < y ? -1 : x > y ? 1 : 0) * (down ? -1 : 1);
  });
  const head = el("tr", {}, ...KERNEL_COLUMNS.map(([k, title]) => el("th", { class: "link", onclick: () => {
    prof.sort = { key: k, down: prof.sort.key === k ? !prof.sort.down : k !== "name" };
    showKernelTable();
  } }, title + (k === key ? (down ? " ▾" : " ▴") : ""))));
  const table = el("table", { id: "kernel-table" }, head, ...rows.map((r) => el("tr", { class: "link", onclick: () => selectKernel(r.name) },
    ...KERNEL_COLUMNS.map(([k]) => el("td", { class: k === "name" ? "mono" : "num" }, cellText(k, r[k]))))));
  const parts = [el("h4", {}, `${rows.length} kernels over the run`), table];
  for (const [name, times] of Object.entries(prof.stats.steps)) parts.unshift(...stepSeries(name, times));
  $("profile-details").replaceChildren(...parts);
}

// the times between a repeated marker's marks, as a line (one point per step)
function stepSeries(name, times) {
  const W = 340, H = 60, max = Math.max(...times), min = Math.min(...times), mean = times.reduce((a, b) => a + b, 0) / times.length;
  const points = times.map((t, i) => `${(i / Math.max(times.length - 1, 1)) * W},${H - (t / Math.max(max, 1e-9)) * (H - 4)}`);
  const chart = svg("svg", { width: W, height: H, class: "series" });
  chart.append(svg("polyline", { points: points.join(" "), fill: "none", stroke: "#ffb347", "stroke-width": 1.5 }));
  return [el("h4", {}, `"${name}" steps: ${times.length}, mean ${fmtUs(mean)}, min ${fmtUs(min)}, max ${fmtUs(max)}`), chart];
}

// dim every other kernel, bring this one's first run into view and show it (its details link to its source)
function selectKernel(name) {
  if (!prof.ready) return setStatus(`${name}: its runs show once every event is loaded`, "profiler");
  prof.highlight = prof.strings.indexOf(name);
  for (const tr of prof.tracks) {
    if (tr.kind !== "range") continue;
    const j = tr.order.find((i) => tr.nameIdx[i] === prof.highlight);
    if (j === undefined) continue;
    const span = Math.min(prof.t1 - prof.t0, Math.max(tr.dur[j] * 200, 1));
    [prof.t0, prof.t1] = [tr.st[j] - span / 2, tr.st[j] + span / 2];
    return showEvent({ track: tr, i: j });
  }
  scheduleDraw();
}

// select the range event of a device's run number, and bring it into view
function jumpToRun(device, run) {
  const name = (prof.info.runs[device] || [])[run];
  const tr = prof.tracks.find((t) => t.kind === "range" && t.name === device);
  if (!tr || name === undefined) return;
  const occ = prof.info.runs[device].slice(0, run).filter((n) => n === name).length;
  for (let i = 0; i < tr.n; i++) {
    if (prof.strings[tr.nameIdx[i]] !== name || tr.occ[i] !== occ) continue;
    const span = prof.t1 - prof.t0;
    if (tr.st[i] < prof.t0 || tr.st[i] > prof.t1) [prof.t0, prof.t1] = [tr.st[i] - span / 2, tr.st[i] + span / 2];
    return showEvent({ track: tr, i });
  }
}

function openGroup(ctx) {
  showTab("rewrites");
  const group = rw.groups[ctx];
  if (group && group.steps.length) selectStep(ctx, 0, 0);
  else if (group && group.kernel) showKernel(ctx);
}

// a pan of dx CSS px as whole device pixels: the tiles then land on the pixels a fresh draw would give them
const wholePixels = (dx) => Math.round(dx * (window.devicePixelRatio || 1)) / (window.devicePixelRatio || 1);

function setupTimelineInput() {
  const canvas = $("timeline");
  let drag = null;
  canvas.addEventListener("wheel", (e) => {
    if (e.shiftKey || !prof.ready) return; // shift+wheel scrolls the rows
    e.preventDefault();
    if (Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
      const dt = wholePixels(e.deltaX) / scaleOf();
      prof.t0 += dt;
      prof.t1 += dt;
    } else {
      const tm = tOf(Math.max(e.offsetX, LABEL_W)), f = Math.exp(e.deltaY * 0.002);
      const span = clamp((prof.t1 - prof.t0) * f, 0.01, Math.max(prof.dur, 1) * 2);
      prof.t0 = tm - ((tm - prof.t0) * span) / (prof.t1 - prof.t0);
      prof.t1 = prof.t0 + span;
    }
    scheduleDraw();
  }, { passive: false });
  canvas.addEventListener("mousedown", (e) => {
    if (e.button === 0 && prof.ready) drag = { x: e.clientX, t0: prof.t0, t1: prof.t1, moved: false };
  });
  window.addEventListener("mousemove", (e) => {
    if (!drag) return;
    drag.moved = drag.moved || Math.abs(e.clientX - drag.x) > 3;
    const dt = wholePixels(drag.x - e.clientX) / scaleOf();
    prof.t0 = drag.t0 + dt;
    prof.t1 = drag.t1 + dt;
    scheduleDraw();
  });
  window.addEventListener("mouseup", (e) => {
    if (!drag) return;
    const moved = drag.moved;
    drag = null;
    if (moved || e.target !== canvas) return;
    const hit = hitTest(e.offsetX, e.offsetY);
    if (hit) showEvent(hit);
  });
  canvas.addEventListener("dblclick", () => {
    prof.t0 = 0;
    prof.t1 = Math.max(prof.dur, 1);
    scheduleDraw();
  });
  window.addEventListener("resize", () => { if (prof.ready) resizeCanvas(); });
}

// for tests and debugging: where a kernel is drawn, and how long a frame took
window.vizProbe = {
  ready: () => prof.ready,
  painted: () => Boolean(prof.painted), // the overview or the full timeline is on the canvas
  texts: () => ({ width: prof.width, texts: prof.texts }), // every marker, axis and range label the last frame drew
  drawMs: () => prof.drawMs,
  settled: () => Boolean(prof.ready && prof.settled && !prof.pending), // every tile in view is drawn
  tilesMade: () => tiles.made, // tiles the last frame made (the others were kept from earlier frames)
  redraw: (fresh = false) => { if (fresh) tiles.reset(); draw(); return prof.drawMs; }, // fresh: every tile again
  frameWithin: (budget) => { draw(budget); return prof.settled; }, // a frame as input gets it, with this tile budget
  setView: (t0, t1) => { prof.t0 = t0; prof.t1 = t1; draw(); },
  selectKernel: (name) => selectKernel(name),
  layoutsPending: () => layouts.waiting.size, // graphs sent to the layout worker and not back yet
  graphDrawn: () => Boolean(rw.drawnMsg && $("viewport")), // a graph of the picked step is on screen
  graphLod: () => rw.lod, // "far" (a sketch) or "near" (every node an element)
  graphsBuilt: () => rw.graphs.filter((m) => m.parts && m.parts.elements === rw.nodes && m.parts.built).length, // idle
  kernelPoint(name) {
    for (const row of prof.rows) {
      const tr = row.track;
      if (tr.kind !== "range") continue;
      for (let i = 0; i < tr.n; i++) {
        if (prof.strings[tr.nameIdx[i]] !== name) continue;
        const r = $("timeline").getBoundingClientRect();
        const x = Math.max(xOf(tr.st[i]), LABEL_W) + Math.max(xOf(tr.st[i] + tr.dur[i]) - xOf(tr.st[i]), 1) / 2;
        return { x: r.left + x, y: r.top + row.y + 3 + tr.level[i] * ROW_H + ROW_H / 2 };
      }
    }
    return null;
  },
};

// *** start ***

async function main() {
  $("tab-rewrites").addEventListener("click", () => showTab("rewrites"));
  $("tab-profiler").addEventListener("click", () => showTab("profiler"));
  $("help-button").addEventListener("click", () => toggleHelp());
  $("fit-button").addEventListener("click", fitGraph);
  $("search").addEventListener("input", () => { clearTimeout(searchTimer); searchTimer = setTimeout(runSearch, 250); });
  document.addEventListener("click", (e) => { if (!e.target.closest("#search-results, #search")) $("search-results").hidden = true; });
  document.addEventListener("keydown", onKey);
  setupGraphInput();
  setupTimelineInput();
  try {
    rw.groups = await getJSON("/ctxs");
    renderSidebar();
    setStatus(`${rw.groups.length} groups`, "rewrites");
    if (rw.groups.length && !layouts.worker) startLayoutWorker();
  } catch (e) {
    setStatus(`rewrites: ${e}`, "rewrites");
  }
}

main();
