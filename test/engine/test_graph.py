"""Tests for fusegrad/engine/graph.py: graph_class, GraphRunner batches of a TinyJit's captured kernels (batch sizes
from JIT_BATCH_SIZE, JIT=2 and single kernels left alone, state, views and returned inputs through a graph, timing)
and MultiGraphRunner's transfers. The tests swap CPU's own graph (runtime/graph/cpu.py) for a counting base runner."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.device import Compiled, Device
from fusegrad.engine.jit import GraphRunner, MultiGraphRunner, TinyJit, graph_class
from fusegrad.engine.realize import BufferXfer, CompiledRunner, ExecItem
from fusegrad.helpers import JIT, JIT_BATCH_SIZE, Context, GlobalCounters
from fusegrad.runtime.graph.cpu import CPUGraph
from test.shared import expected, steps, vec


class CPUTestGraph(GraphRunner):
    """A device graph for the tests: the base runner, counting its launches."""

    launches = 0

    def __call__(self, rawbufs: list, var_vals: dict[str, int], wait: bool = False) -> float | None:  # type: ignore[type-arg]
        CPUTestGraph.launches += 1
        return super().__call__(rawbufs, var_vals, wait)


@pytest.fixture
def cpu_graph() -> Iterator[Compiled]:
    """The CPU device batching captured kernels with CPUTestGraph for one test."""
    dev = Device["CPU"]
    old, dev.graph = dev.graph, CPUTestGraph
    CPUTestGraph.launches = 0
    try:
        yield dev
    finally:
        dev.graph = old


def test_graph_class() -> None:
    dev = Device["CPU"]
    assert graph_class(dev) is CPUGraph  # CPU batches a JIT's kernels into generated C
    assert graph_class(Device["PYTHON"]) is None
    old = dev.graph
    try:
        dev.graph = functools.partial(CPUTestGraph)
        assert graph_class(dev) is CPUTestGraph  # a partial (a graph class with bound options) is unwrapped
    finally:
        dev.graph = old


def test_a_device_graph_runs_the_kernels_as_one_item(cpu_graph: Compiled) -> None:
    step = TinyJit(lambda x: steps(x, 3))
    for i in range(5):
        assert step(vec(i, -i)).tolist() == expected([i, -i], 3)
    assert len(step.jit_cache) == 1
    graph = step.jit_cache[0].prg
    assert isinstance(graph, CPUTestGraph)
    assert len(graph.jit_cache) == 3
    assert CPUTestGraph.launches == 3  # calls 3, 4 and 5 replay
    assert step.captured is not None
    assert len(step.captured.jit_cache) == 3  # the captured list keeps the kernels one by one
    GlobalCounters.reset()
    step(vec(1, 1))
    assert GlobalCounters.kernel_count == 3  # a graph counts the kernels it launched


def test_graph_batches_grow_from_jit_batch_size(cpu_graph: Compiled) -> None:
    step = TinyJit(lambda x: steps(x, 8))
    with Context(JIT_BATCH_SIZE=2):
        for i in range(3):
            assert step(vec(i)).tolist() == expected([i], 8)
    sizes = [len(ei.prg.jit_cache) for ei in step.jit_cache if isinstance(ei.prg, GraphRunner)]
    assert sizes == [2, 4, 2]  # each batch may be twice the one before
    assert JIT_BATCH_SIZE.value == 32


def test_jit_2_and_single_kernels_are_not_graphed(cpu_graph: Compiled) -> None:
    one = TinyJit(lambda x: steps(x, 1))
    ungraphed = TinyJit(lambda x: steps(x, 3))
    for i in range(3):
        assert one(vec(i)).tolist() == expected([i], 1)
        with Context(JIT=2):
            assert ungraphed(vec(i)).tolist() == expected([i], 3)
    assert [type(ei.prg) for ei in one.jit_cache] == [CompiledRunner]
    assert all(isinstance(ei.prg, CompiledRunner) for ei in ungraphed.jit_cache)
    assert len(ungraphed.jit_cache) == 3
    assert JIT.value == 1


def test_graph_replays_match_eager_with_state_and_views(cpu_graph: Compiled) -> None:
    """A weight updated in place, an input read through a view and a returned input all go through the graph."""
    weight = vec(0.0, 0.0, 0.0)

    @TinyJit
    def step(x: Tensor) -> tuple[Tensor, Tensor]:
        weight.assign(weight + x[1:4]).realize()
        return (weight * 2).realize(), x

    total = np.zeros(3)
    for i in range(5):
        x = Tensor(list(np.arange(5.0) + i)).realize()
        out, same = step(x)
        total += np.arange(1.0, 4.0) + i
        np.testing.assert_allclose(out.numpy(), total * 2)
        assert same is x
    assert all(isinstance(ei.prg, CPUTestGraph) for ei in step.jit_cache)


def test_graph_runner_times_a_waited_call(cpu_graph: Compiled) -> None:
    step = TinyJit(lambda x: steps(x, 2))
    for i in range(3):
        step(vec(i))
    graph = step.jit_cache[0].prg
    assert isinstance(graph, GraphRunner)
    seconds = graph([vec(5).uop.base.buffer], {}, wait=True)
    assert seconds is not None
    assert seconds >= 0


def test_multi_graph_runner_takes_transfers_between_devices_of_one_type() -> None:
    src = vec(1, 2).uop.base.buffer
    dest = Tensor.empty(2, device="CPU:1").uop.base.buffer
    xfer = ExecItem(Tensor.empty(2).uop, [dest, src], prg=BufferXfer(8, "CPU:1", "CPU"))
    cpu, cpu1 = Device["CPU"], Device["CPU:1"]
    assert MultiGraphRunner.supports_exec_item([cpu, cpu1], xfer)
    assert not GraphRunner.supports_exec_item([cpu], xfer)  # one device, kernels only
    assert not GraphRunner.supports_exec_item([cpu, cpu1], xfer)
