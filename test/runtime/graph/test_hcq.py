"""Tests for fusegrad/runtime/graph/hcq.py: HCQGraph is the reference's graph class for devices fusegrad does not
have, so no device's graph is it, the reference's `graph_class(dev) is HCQGraph` check runs and is False, and
constructing one is a clear error naming the missing backends."""

from __future__ import annotations

import pytest

from fusegrad import Tensor, TinyJit
from fusegrad.device import Device
from fusegrad.engine.jit import MultiGraphRunner, graph_class
from fusegrad.runtime.graph.cpu import CPUGraph
from fusegrad.runtime.graph.hcq import HCQGraph


def test_hcq_graph_is_a_multi_graph_runner() -> None:
    assert issubclass(HCQGraph, MultiGraphRunner)


@pytest.mark.parametrize("name", ["CPU", "PYTHON", "NULL"])
def test_no_device_returns_hcq_graph(name: str) -> None:
    assert graph_class(Device[name]) is not HCQGraph


def test_the_references_graph_comparison_runs_unchanged() -> None:
    """test_jit's TestJitGraphSplit.expect: HCQ expectations are skipped, CPU's graph is a MultiGraphRunner."""
    step = TinyJit(lambda x: ((x + 1).realize() * 2).realize() - 3)
    for i in range(3):
        assert step(Tensor([float(i)]).realize()).tolist() == [(i + 1) * 2 - 3]
    graph_t = graph_class(Device["CPU"])
    assert graph_t is not HCQGraph
    assert graph_t is CPUGraph
    assert graph_t is not None
    assert issubclass(graph_t, MultiGraphRunner)
    assert isinstance(step.jit_cache[0].prg, CPUGraph)  # the batch the "multigraph" expectations describe


def test_constructing_hcq_graph_names_the_missing_backends() -> None:
    with pytest.raises(NotImplementedError, match=r"HCQGraph: fusegrad has no hardware-command-queue device \(AMD, NV"):
        HCQGraph([], [], {})
    with pytest.raises(RuntimeError, match=r"QCOM.*got a batch of 0 items.*CPUGraph"):  # NotImplementedError is one
        HCQGraph([], [], {})
