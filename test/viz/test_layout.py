"""Tests for the layered DAG drawing of rewrite graphs (validity, collapse, speed) on layout_reference.py, the Python
reference of the page's layout.js (test_browser.py checks the two agree box for box)."""

from __future__ import annotations

import itertools
import json
import random
import time
from typing import Any

from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp
from fusegrad.viz.rewrites import uop_to_json
from test.viz.layout_reference import HIDDEN_ID, NODE_GAP, Layout, label_size, layout_graph

Graph = dict[int, dict[str, Any]]


def random_dag(n: int, seed: int = 0) -> Graph:
    """n nodes, each using up to 3 of the 40 nodes before it (like a kernel's index and ALU graph)."""
    rng = random.Random(seed)
    graph: Graph = {}
    for i in range(n):
        srcs = sorted({rng.randrange(max(0, i - 40), i) for _ in range(rng.choice((0, 1, 2, 2, 3)))}) if i > 4 else []
        graph[i] = {"label": f"ADD\ndtypes.float\nnode {i}", "src": list(enumerate(srcs))}
    return graph


def chain_with_shared_input(n: int) -> Graph:
    """x0 + c + c + ... : one input used by every layer (a training loop's `+=` of one tensor)."""
    graph: Graph = {0: {"label": "x", "src": []}, 1: {"label": "c", "src": []}}
    for i in range(2, n):
        graph[i] = {"label": "ADD", "src": [(0, i - 1), (1, 1)]}
    return graph


def assert_valid(graph: Graph, layout: Layout) -> None:
    """Every node has a box of its label's size; every edge runs left to right; boxes in a column don't overlap."""
    assert set(layout.boxes) == set(graph)
    for n, (_, _, w, h) in layout.boxes.items():
        assert (w, h) == label_size(graph[n]["label"])
    assert len(layout.edges) == sum(len(v["src"]) for v in graph.values())
    for e in layout.edges:
        src, dst = layout.boxes[e.src], layout.boxes[e.dst]
        assert src[0] + src[2] < dst[0], f"edge {e.src}->{e.dst} does not run left to right"
        assert e.points[0] == (src[0] + src[2], src[1] + src[3] / 2)
        assert e.points[-1] == (dst[0], dst[1] + dst[3] / 2)
    columns: dict[float, list[tuple[float, float, float, float]]] = {}
    for box in layout.boxes.values():
        columns.setdefault(box[0], []).append(box)
    for boxes in columns.values():
        boxes.sort(key=lambda b: b[1])
        for upper, lower in itertools.pairwise(boxes):
            assert upper[1] + upper[3] + NODE_GAP - 1e-6 <= lower[1], "boxes overlap in a column"
    assert all(b[0] >= 0 and b[1] >= -1e-6 for b in layout.boxes.values())
    assert all(
        b[0] + b[2] <= layout.width + 1e-6 and b[1] + b[3] <= layout.height + 1e-6 for b in layout.boxes.values()
    )


class TestLayout:
    def test_real_graph_is_valid_and_json_ready(self) -> None:
        a = UOp.variable("a", 0, 10)
        sink = UOp.sink((a * 3 + a * 2).cast(dtypes.float), a + 1)
        graph = uop_to_json(sink)
        layout = layout_graph(graph)
        assert_valid(graph, layout)
        doc = json.loads(json.dumps(layout.to_json()))
        assert set(doc["boxes"]) == {str(n) for n in graph}
        assert all(len(e[3]) >= 2 for e in doc["edges"])

    def test_sink_is_in_the_last_column_and_inputs_sit_by_their_user(self) -> None:
        graph: Graph = {1: {"label": "a", "src": []}, 2: {"label": "b", "src": [(0, 1)]},
                        3: {"label": "c", "src": [(0, 2)]}, 4: {"label": "late input", "src": []},
                        5: {"label": "SINK", "src": [(0, 3), (1, 4)]}}  # fmt: skip
        boxes = layout_graph(graph).boxes
        assert boxes[5][0] == max(b[0] for b in boxes.values())
        assert boxes[4][0] == boxes[3][0]  # a leaf sits just before its first user, not in column 0

    def test_long_edges_bend_through_the_columns_they_cross(self) -> None:
        graph: Graph = {1: {"label": "x", "src": []}, 2: {"label": "f", "src": [(0, 1)]},
                        3: {"label": "g", "src": [(0, 2)]}, 4: {"label": "h", "src": [(0, 3), (1, 1)]}}  # fmt: skip
        layout = layout_graph(graph)
        long_edge = next(e for e in layout.edges if (e.src, e.dst) == (1, 4))
        assert len(long_edge.points) == 2 + 2 * 2  # two crossed columns, two bend points each

    def test_random_dags_are_valid(self) -> None:
        for seed in range(5):
            graph = random_dag(300, seed)
            assert_valid(graph, layout_graph(graph))

    def test_a_node_used_in_every_layer_stays_cheap(self) -> None:
        graph = chain_with_shared_input(3000)
        start = time.perf_counter()
        layout = layout_graph(graph, max_nodes=10**9)
        assert time.perf_counter() - start < 2.0
        assert_valid(graph, layout)

    def test_duplicate_sources_give_one_edge_per_input(self) -> None:
        graph: Graph = {1: {"label": "x", "src": []}, 2: {"label": "x*x", "src": [(0, 1), (1, 1)]}}
        layout = layout_graph(graph)
        assert [(e.src, e.dst, e.index) for e in layout.edges] == [(1, 2, 0), (1, 2, 1)]

    def test_cycles_and_empty_graphs_dont_hang(self) -> None:
        assert layout_graph({}).boxes == {}
        cyclic: Graph = {1: {"label": "a", "src": [(0, 2)]}, 2: {"label": "b", "src": [(0, 1)]}}
        assert set(layout_graph(cyclic).boxes) == {1, 2}

    def test_deep_graphs_need_no_recursion(self) -> None:
        graph = {i: {"label": "NEG", "src": [(0, i - 1)] if i else []} for i in range(10_000)}
        layout = layout_graph(graph, max_nodes=10**9)
        assert len(layout.boxes) == 10_000

    def test_huge_graphs_keep_the_part_nearest_the_sink(self) -> None:
        graph = random_dag(1000)
        layout = layout_graph(graph, max_nodes=200)
        kept = set(layout.boxes) - {HIDDEN_ID}
        assert len(kept) == 200
        assert HIDDEN_ID in layout.boxes
        assert layout.hidden == 800  # they stand behind the one "hidden" node
        assert 999 in kept  # the sink
        assert any(e.src == HIDDEN_ID for e in layout.edges)

    def test_long_labels_are_cut(self) -> None:
        w, h = label_size("x" * 500 + "\n" * 40)
        assert w < 400
        assert h < 200
