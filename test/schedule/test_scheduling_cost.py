"""Scheduling work grows linearly with the graph: find_realizes walks a chain's kernels once each, and a layer repeated
n times is simplified once (timings are bench/schedule.py's; these count the work, which load does not change)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from fusegrad import Tensor
from fusegrad.schedule import kernelize, rangeify


def chain(layers: int) -> Tensor:
    x, w = Tensor.empty(8, 8), Tensor.empty(8, 8)
    for _ in range(layers):
        x = (x @ w).relu()
    return x


def test_chain_walks_each_kernel_once(monkeypatch: pytest.MonkeyPatch) -> None:
    walks: list[Any] = []
    original = kernelize.note_reads

    def counted(root: Any, *args: Any) -> None:
        walks.append(root)
        original(root, *args)

    monkeypatch.setattr(kernelize, "note_reads", counted)
    assert len(chain(40).schedule()) == 40
    assert len(walks) == 40  # one reads-only walk per kernel: no second round over kernels already decided


def test_a_repeated_layer_is_simplified_once(monkeypatch: pytest.MonkeyPatch) -> None:
    simplified: list[Any] = []
    original = rangeify.graph_rewrite

    def counted(ast: Any, *args: Any, **kwargs: Any) -> Any:
        simplified.append(ast)
        return original(ast, *args, **kwargs)

    rangeify._simplified.clear()
    monkeypatch.setattr(rangeify, "graph_rewrite", counted)
    assert len(chain(30).schedule()) == 30
    assert len(simplified) <= 3  # the first layer, the output layer and one AST for all the layers between


def test_the_simplify_cache_keeps_only_the_latest_unsimplified_asts_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """The latest few ASTs are kept (a repeated layer's next AST is then that node: no content key), older ones die:
    the content-keyed cache behind them hits when an equal AST is built again."""
    seen: list[weakref.ref[Any]] = []
    original = rangeify.simplify_kernel

    def remembered(ast: Any) -> Any:
        seen.append(weakref.ref(ast))
        return original(ast)

    rangeify._simplified.clear()
    rangeify._simplified_nodes.clear()
    monkeypatch.setattr(rangeify, "_SIMPLIFIED_NODES_MAX", 1)
    monkeypatch.setattr(kernelize, "simplify_kernel", remembered)
    chain(3).schedule()
    first = len(rangeify._simplified)
    gc.collect()
    assert len({id(ref()) for ref in seen if ref() is not None}) == 1  # the last one, held in front
    assert len(rangeify._simplified_nodes) == 1
    rangeify._simplified_nodes.clear()
    gc.collect()
    assert all(ref() is None for ref in seen)
    chain(3).schedule()  # the same ASTs built again, as new nodes: all hits on their content
    assert len(rangeify._simplified) == first


def test_a_repeated_layer_reuses_the_live_ast(monkeypatch: pytest.MonkeyPatch) -> None:
    keyed: list[Any] = []
    original = rangeify._simplify_by_content

    def counted(ast: Any) -> Any:
        keyed.append(ast)
        return original(ast)

    rangeify._simplified_nodes.clear()
    monkeypatch.setattr(rangeify, "_simplify_by_content", counted)
    assert len(chain(30).schedule()) == 30
    assert len(keyed) <= 3  # the first layer, the output layer and one AST for all the layers between


def test_a_second_round_still_runs_when_a_walk_inlined_a_split_reduce(monkeypatch: pytest.MonkeyPatch) -> None:
    """`r + 1` and `r * 2` of one sum r, realized together: the first output's walk computes r inline, the second's
    read makes r a kernel of its own, so the round is walked again and both outputs read the stored r."""
    import numpy as np

    walks: list[Any] = []
    original = kernelize.note_reads

    def counted(root: Any, *args: Any) -> None:
        walks.append(root)
        original(root, *args)

    monkeypatch.setattr(kernelize, "note_reads", counted)
    a = np.arange(6, dtype=np.float32)
    r = Tensor(a).sum()
    first, second = r + 1, r * 2
    assert len([i for i in first.schedule(second) if i.ast.op.name == "SINK"]) == 3
    assert len(walks) > 3  # the walks of the first round, then a second round
    np.testing.assert_allclose([first.item(), second.item()], [a.sum() + 1, a.sum() * 2])


def test_a_realize_visits_lazy_tensors_only() -> None:
    """Realized tensors (weights, optimiser state) leave the set a realize repoints; assigning makes one lazy again,
    and the realize still repoints it and every lazy tensor reading it."""
    import numpy as np

    from fusegrad import tensor

    weights = [Tensor.ones(3).contiguous().realize() for _ in range(200)]
    (weights[0] + 1).realize()
    lazy = {ref() for ref in tensor._lazy_tensors}
    assert not any(w in lazy for w in weights)
    weights[1].assign(weights[1] * 3)
    reader = weights[1] + 1
    assert weights[1] in {ref() for ref in tensor._lazy_tensors}
    weights[1].realize()
    np.testing.assert_array_equal(weights[1].numpy(), [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(reader.numpy(), [4.0, 4.0, 4.0])
    assert weights[1] not in {ref() for ref in tensor._lazy_tensors}


def test_building_a_kernel_records_no_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fusion policy's reads are noted in find_realizes' walks only: a kernel's build walks the same reads once
    the decisions are made, and would only throw its records away."""
    noted: list[bool] = []
    original = rangeify.KernelBuilder.note_read

    def counted(self: Any, *args: Any) -> None:
        noted.append(self.reads_only)
        original(self, *args)

    monkeypatch.setattr(rangeify.KernelBuilder, "note_read", counted)
    assert len(chain(10).schedule()) == 10
    assert noted
    assert all(noted)  # every read noted was a reads-only walk's
