"""The reference of the page's graph layout (fusegrad/viz/static/layout.js), in Python: the same steps in the same
order, so the browser tests can check the page's layout against it box for box, and the tests here check the layout's
properties (validity, collapse, repeats drawn once) where they are easy to read.

`layout_graph(graph)` takes `uop_to_json`'s `{id: {"label", "src": [(index, id)]}}` and returns a `Layout`: layers by
longest path, dummy nodes on long edges, a few barycenter sweeps to order each layer, then coordinates. Graphs past
`max_nodes` keep the part nearest the sink.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CHAR_WIDTH, LINE_HEIGHT, PADDING = 7.2, 14.0, 8.0  # px, for style.css's 12px monospace node labels
MAX_LABEL_CHARS, MAX_LABEL_LINES = 48, 10  # longer labels are cut when drawn (app.js cuts the same way)
LAYER_GAP, NODE_GAP = 56.0, 12.0
MAX_NODES = 3000  # bigger graphs keep the nodes nearest the sink, the rest become one "hidden" node
SWEEPS = 4  # barycenter sweeps, alternating down and up
HIDDEN_ID = -1  # id of the node that stands for the hidden part of a collapsed graph


@dataclass(frozen=True, slots=True)
class Edge:
    """A source edge `src -> dst` (dst's input number `index`) through the bend points of its dummy nodes."""

    src: int
    dst: int
    index: int
    points: list[tuple[float, float]]


@dataclass(slots=True)
class Layout:
    """Boxes by node id as (x, y, width, height) from the top left; edges; the canvas size; nodes hidden (collapse)."""

    boxes: dict[int, tuple[float, float, float, float]] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    width: float = 0.0
    height: float = 0.0
    hidden: int = 0
    notes: dict[int, str] = field(default_factory=dict)  # labels the drawing shows instead (merged repeats)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: boxes and points rounded to whole pixels (the browser needs no more)."""
        boxes = {str(k): [round(v) for v in box] for k, box in self.boxes.items()}
        edges = [[e.src, e.dst, e.index, [[round(x), round(y)] for x, y in e.points]] for e in self.edges]
        return {"boxes": boxes, "edges": edges, "width": round(self.width), "height": round(self.height),
                "hidden": self.hidden, "labels": {str(k): v for k, v in self.notes.items()}}  # fmt: skip


def label_size(label: str) -> tuple[float, float]:
    """The drawn box of a label, cut to MAX_LABEL_LINES lines of MAX_LABEL_CHARS characters."""
    lines = label.split("\n")[:MAX_LABEL_LINES]
    chars = max((min(len(line), MAX_LABEL_CHARS) for line in lines), default=0)
    return chars * CHAR_WIDTH + 2 * PADDING, len(lines) * LINE_HEIGHT + PADDING


def collapse(
    graph: Mapping[int, Mapping[str, Any]], max_nodes: int
) -> tuple[dict[int, list[tuple[int, int]]], dict[int, str]]:
    """Inputs `[(index, source id)]` per node and labels, keeping at most `max_nodes` nodes: those fewest edges from
    a sink; the rest become one node (HIDDEN_ID) that feeds every kept node whose sources were cut."""
    inputs = {n: [(int(i), s) for i, s in v["src"] if s in graph] for n, v in graph.items()}
    labels = {n: str(v["label"]) for n, v in graph.items()}
    if len(graph) <= max_nodes:
        return inputs, labels
    inputs, labels = merge_repeats(inputs, labels)
    if len(inputs) <= max_nodes:
        return inputs, labels
    graph = {n: {} for n in inputs}  # only the keys (in order) matter below
    used = {s for srcs in inputs.values() for _, s in srcs}
    kept = dict.fromkeys(n for n in reversed(list(graph)) if n not in used)  # the graph's own sink (last) first
    frontier = list(kept)
    while frontier and len(kept) < max_nodes:  # breadth first from the sinks
        found = dict.fromkeys(s for n in frontier for _, s in inputs[n] if s not in kept)
        kept.update(found)
        frontier = list(found)
    kept = dict.fromkeys(list(kept)[:max_nodes])
    cut = {n: [(i, s) for i, s in inputs[n] if s in kept] for n in kept}
    for n in kept:
        if len(cut[n]) < len(inputs[n]):
            cut[n].append((len(inputs[n]), HIDDEN_ID))
    cut[HIDDEN_ID] = []
    labels = {n: labels[n] for n in kept} | {HIDDEN_ID: f"{len(graph) - len(kept)} more nodes\n(graph too big to draw)"}
    return cut, labels


_NUMBER = re.compile(r"\d+")


def merge_repeats(
    inputs: dict[int, list[tuple[int, int]]], labels: dict[int, str]
) -> tuple[dict[int, list[tuple[int, int]]], dict[int, str]]:
    """Draw repeated subgraphs once: nodes whose labels match up to numbers (buffer ids, sizes, constants) and whose
    sources are the same repeated subgraphs become one node marked with its count. Inputs must come sources first."""
    structures: dict[tuple[Any, ...], int] = {}
    shape_of: dict[int, int] = {}  # node -> id of its structure
    first_of: dict[int, int] = {}  # structure -> the node drawn for all nodes of that structure
    drawn: dict[int, int] = {}  # node -> the node drawn for it
    counts: dict[int, int] = {}
    for n, srcs in inputs.items():
        key = (_NUMBER.sub("#", labels[n]), tuple((i, shape_of[s]) for i, s in srcs))
        shape_of[n] = structures.setdefault(key, len(structures))
        drawn[n] = first_of.setdefault(shape_of[n], n)
        counts[drawn[n]] = counts.get(drawn[n], 0) + 1
    merged = {rep: list(dict.fromkeys((i, drawn[s]) for i, s in inputs[rep])) for rep in counts}
    merged_labels = {
        rep: labels[rep] + (f"\nrepeated {k} times (drawn once)" if k > 1 else "") for rep, k in counts.items()
    }
    return merged, merged_labels


def topological_order(sources: Mapping[int, Sequence[int]]) -> list[int]:
    """Sources before users (Kahn's algorithm, explicit queue); nodes on a cycle are appended last."""
    pending = {n: len(srcs) for n, srcs in sources.items()}
    users: dict[int, list[int]] = {n: [] for n in sources}
    for n, srcs in sources.items():
        for s in srcs:
            users[s].append(n)
    order = [n for n, count in pending.items() if count == 0]
    for n in order:  # order grows while it is walked
        for u in users[n]:
            pending[u] -= 1
            if pending[u] == 0:
                order.append(u)
    if len(order) < len(sources):
        seen = set(order)
        order += [n for n in sources if n not in seen]
    return order


def assign_layers(order: Sequence[int], sources: Mapping[int, Sequence[int]]) -> dict[int, int]:
    """Longest path from the sources, then every node moved right to just before its first user."""
    layer: dict[int, int] = {}
    for n in order:
        layer[n] = 1 + max((layer.get(s, -1) for s in sources[n]), default=-1)
    first_user: dict[int, int] = {}
    for n in reversed(order):
        if n in first_user:
            layer[n] = max(layer[n], first_user[n] - 1)  # leaves sit beside their first user, not in column 0
        for s in sources[n]:
            first_user[s] = min(first_user.get(s, layer[n]), layer[n])
    return layer


@dataclass(slots=True)
class Grid:
    """Slots 0..n-1 are the real nodes in topological order, then one dummy slot per layer crossed by a long edge;
    layers hold slots, preds/succs the slot's neighbours in the previous and next layer."""

    layers: list[list[int]]
    preds: list[list[int]]
    succs: list[list[int]]
    chains: dict[tuple[int, int], list[int]]  # (src slot, dst slot) -> dummy slots along the edge, left to right

    def add_slot(self) -> int:
        self.preds.append([])
        self.succs.append([])
        return len(self.preds) - 1


def build_grid(order: Sequence[int], sources: Mapping[int, Sequence[int]], layer: Mapping[int, int]) -> Grid:
    """Layers with a dummy node per layer crossed by a long edge. The shortest edges get dummies first, within a
    budget of the node count: longer ones are drawn straight, so a node used in every layer stays cheap."""
    slot = {n: i for i, n in enumerate(order)}
    grid = Grid([[] for _ in range(max(layer.values(), default=-1) + 1)], [[] for _ in order], [[] for _ in order], {})
    for n in order:
        grid.layers[layer[n]].append(slot[n])
    edges = sorted({(layer[n] - layer[s], slot[s], slot[n]) for n in order for s in sources[n]})
    budget = len(order) + 100
    for span, s, n in edges:
        chain: list[int] = []
        if 1 < span <= budget:
            budget -= span - 1
            chain = [grid.add_slot() for _ in range(span - 1)]
            for i, d in enumerate(chain):
                grid.layers[layer[order[s]] + 1 + i].append(d)
            grid.chains[(s, n)] = chain
        path = [s, *chain, n]
        for a, b in itertools.pairwise(path):
            grid.succs[a].append(b)
            grid.preds[b].append(a)
    return grid


def neighbour_means(nodes: Sequence[int], neighbours: Sequence[list[int]], values: list[float]) -> list[float]:
    """Per node, the mean of `values` over its neighbours (its own value when it has none)."""
    get = values.__getitem__
    return [sum(map(get, near)) / len(near) if (near := neighbours[n]) else values[n] for n in nodes]


def order_layers(grid: Grid) -> None:
    """Barycenter sweeps: each node moves to the mean relative position of its neighbours on the side swept from."""
    position = [0.0] * len(grid.preds)
    for nodes in grid.layers:
        scale = 1.0 / max(len(nodes) - 1, 1)
        for i, n in enumerate(nodes):
            position[n] = i * scale
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        neighbours = grid.preds if down else grid.succs
        for nodes in grid.layers if down else reversed(grid.layers):
            if len(nodes) < 2:
                continue
            keys = neighbour_means(nodes, neighbours, position)
            nodes[:] = [nodes[i] for i in sorted(range(len(nodes)), key=keys.__getitem__)]
            scale = 1.0 / max(len(nodes) - 1, 1)
            for i, n in enumerate(nodes):
                position[n] = i * scale


def place_column(nodes: Sequence[int], want: Sequence[float], heights: Sequence[float]) -> list[float]:
    """Centres as close to `want` as the order and gaps allow: the mean of a packing from the top and one from the
    bottom (each alone drifts towards its end)."""
    if len(nodes) == 1:
        return list(want)
    down: list[float] = []
    bottom = float("-inf")
    for n, w in zip(nodes, want, strict=True):
        half = heights[n] / 2
        centre = w if w - half >= bottom else bottom + half
        down.append(centre)
        bottom = centre + half + NODE_GAP
    up = [0.0] * len(nodes)
    ceiling = float("inf")
    for i in range(len(nodes) - 1, -1, -1):
        half = heights[nodes[i]] / 2
        centre = want[i] if want[i] + half <= ceiling else ceiling - half
        up[i] = centre
        ceiling = centre - half - NODE_GAP
    return [(a + b) / 2 for a, b in zip(down, up, strict=True)]


def assign_y(grid: Grid, heights: Sequence[float]) -> list[float]:
    """Centre y of every slot: stacked columns, then sweeps pulling each column towards its neighbours."""
    center = [0.0] * len(heights)
    for nodes in grid.layers:
        y = 0.0
        for n in nodes:
            center[n] = y + heights[n] / 2
            y += heights[n] + NODE_GAP
    for sweep in range(SWEEPS):
        neighbours = grid.preds if sweep % 2 == 0 else grid.succs
        for nodes in grid.layers if sweep % 2 == 0 else reversed(grid.layers):
            want = neighbour_means(nodes, neighbours, center)
            for n, y in zip(nodes, place_column(nodes, want, heights), strict=True):
                center[n] = y
    return center


def route(
    grid: Grid,
    src: int,
    dst: int,
    boxes: Sequence[tuple[float, float, float, float]],
    columns: Sequence[tuple[float, float]],
    center: Sequence[float],
    src_layer: int,
) -> list[tuple[float, float]]:
    """src's right side, across each dummy's column at the dummy's height, to dst's left side."""
    sx, sy, sw, sh = boxes[src]
    points = [(sx + sw, sy + sh / 2)]
    for i, d in enumerate(grid.chains.get((src, dst), ())):
        x, w = columns[src_layer + 1 + i]
        points += [(x, center[d]), (x + w, center[d])]
    dx, dy, _, dh = boxes[dst]
    return [*points, (dx, dy + dh / 2)]


def layout_graph(graph: Mapping[int, Mapping[str, Any]], max_nodes: int = MAX_NODES) -> Layout:
    """Boxes and edge routes for `graph` (`uop_to_json` form). Example: `layout_graph(uop_to_json(sink)).to_json()`."""
    inputs, labels = collapse(graph, max_nodes)
    sources = {n: list(dict.fromkeys(s for _, s in srcs)) for n, srcs in inputs.items()}
    order = topological_order(sources)
    layer = assign_layers(order, sources)
    grid = build_grid(order, sources, layer)
    order_layers(grid)
    sizes = [label_size(labels[n]) for n in order]
    heights = [h for _, h in sizes] + [0.0] * (len(grid.preds) - len(order))
    center = assign_y(grid, heights)
    top = min((c - h / 2 for c, h in zip(center, heights, strict=True)), default=0.0)
    center = [c - top for c in center]
    columns: list[tuple[float, float]] = []  # (x, width) per layer
    for nodes in grid.layers:
        x = columns[-1][0] + columns[-1][1] + LAYER_GAP if columns else 0.0
        columns.append((x, max((sizes[n][0] for n in nodes if n < len(order)), default=0.0)))
    boxes = [(columns[layer[n]][0], center[i] - sizes[i][1] / 2, *sizes[i]) for i, n in enumerate(order)]
    out = Layout(hidden=len(graph) - len(order) + (1 if HIDDEN_ID in inputs else 0))  # real nodes not drawn
    out.notes = {n: labels[n] for n in order if n in graph and labels[n] != str(graph[n]["label"])}
    out.boxes = dict(zip(order, boxes, strict=True))
    out.width = columns[-1][0] + columns[-1][1] if columns else 0.0
    out.height = max((b[1] + b[3] for b in boxes), default=0.0)
    slot = {n: i for i, n in enumerate(order)}
    for i, n in enumerate(order):
        for index, s in inputs[n]:
            points = route(grid, slot[s], i, boxes, columns, center, layer[s])
            out.edges.append(Edge(s, n, index, points))
    return out
