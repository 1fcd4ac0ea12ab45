"""Tests for fusegrad/engine/jit.py's captured list: `jit_cache`, graph runners (GraphRunner, MultiGraphRunner,
graph_class, apply_graph_to_jit), `free_intermediates`, `replan_buffers_memory_layout` and `optimize=True`."""

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


def vec(*values: float) -> Tensor:
    return Tensor(list(values)).realize()


def steps(x: Tensor, n: int) -> Tensor:
    """n realized kernels: x -> (x + 1) * 2 -> ... ."""
    for _ in range(n):
        x = ((x + 1) * 2).realize()
    return x


def expected(values: list[float], n: int) -> list[float]:
    for _ in range(n):
        values = [(v + 1) * 2 for v in values]
    return values


# *** jit_cache ***


def test_jit_cache_lists_what_replays_run() -> None:
    step = TinyJit(lambda x: steps(x, 3))
    assert step.jit_cache == []
    assert step.input_replace == {}
    for i in range(3):
        assert step(vec(i)).tolist() == expected([i], 3)
    assert len(step.jit_cache) == 3
    assert all(isinstance(ei.prg, CompiledRunner) for ei in step.jit_cache)
    assert step.captured is not None
    assert step.captured.jit_cache == step.jit_cache  # no device graph: the captured list is what replays run
    assert set(step.input_replace) == {(0, 1)}  # the first kernel reads the input in slot 1


# *** graph runners ***


def test_graph_class() -> None:
    dev = Device["CPU"]
    assert graph_class(dev) is None  # no fusegrad device declares a graph yet
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


# *** freeing and replanning memory ***


def test_free_intermediates_gives_back_input_dependent_memory() -> None:
    offset = vec(1, 24, 23, 45, 1)

    @TinyJit
    def step(x: Tensor) -> Tensor:
        doubled = (x * 2).contiguous().realize()
        shifted = (doubled + offset).contiguous().realize()
        return shifted.sum().contiguous().realize()

    for i in range(4):
        assert step(vec(i, 1, 2, 3, 4)).item() == 114 + 2 * i
    assert step.captured is not None
    for _ in range(2):  # freeing twice frees nothing more
        before = GlobalCounters.mem_used
        step.captured.free_intermediates()
        step.captured.free_intermediates()
        assert before - GlobalCounters.mem_used == 5 * 4 * 2 + 4  # doubled, shifted, the sum; not the offset
        assert step(vec(11, 1, 2, 3, 4)).item() == 136  # the next replay allocates them again


def test_free_intermediates_keeps_in_place_updates() -> None:
    total = vec(1)

    @TinyJit
    def step(y: Tensor) -> Tensor:
        total.assign(total + y).realize()
        return total

    for _ in range(5):
        step(vec(1))
    assert step.captured is not None
    before = GlobalCounters.mem_used
    step.captured.free_intermediates()
    assert before == GlobalCounters.mem_used
    step(vec(2))
    assert total.item() == 8


def distinct_bases(step: TinyJit) -> set[int]:  # type: ignore[type-arg]
    assert step.captured is not None
    return {id(b.base) for ei in step.captured.jit_cache for b in ei.bufs if b is not None}


def broadcast_sum(x: Tensor, scale: Tensor, offset: Tensor) -> Tensor:
    return (x * scale + offset).reshape(5, 1).expand(5, 100).contiguous().sum()


def test_replan_buffers_memory_layout_moves_buffers_into_one_arena() -> None:
    scale, offset = vec(2, 2, 2, 2, 2), vec(1, 24, 23, 45, 1)
    step = TinyJit(lambda x: broadcast_sum(x, scale, offset))
    for i in range(4):
        assert step(vec(i, 1, 2, 3, 4)).item() == 11400 + 200 * i
    assert len(distinct_bases(step)) == 4  # scale, offset, the expanded intermediate, the result
    assert step.captured is not None
    step.captured.replan_buffers_memory_layout()
    assert len(distinct_bases(step)) == 2  # the arena and the result (a returned tensor's memory stays)
    assert step(vec(11, 1, 2, 3, 4)).item() == 13600
    assert scale.tolist() == [2] * 5  # the weights were copied, not moved away from their tensors


def test_replan_leaves_written_state_with_its_tensor() -> None:
    total = vec(0, 0)

    @TinyJit
    def step(y: Tensor) -> Tensor:
        total.assign(total + (y * 2).contiguous()).realize()
        return (total + 1).realize()

    for _ in range(3):
        step(vec(1, 1))
    assert step.captured is not None
    step.captured.replan_buffers_memory_layout()
    assert step(vec(1, 1)).tolist() == [9, 9]
    assert total.tolist() == [8, 8]  # the replay still updates the tensor's own memory


def test_optimize_replans_at_capture() -> None:
    scale, offset = vec(2, 2, 2, 2, 2), vec(1, 24, 23, 45, 1)
    step = TinyJit(lambda x: broadcast_sum(x, scale, offset), optimize=True)
    for i in range(4):
        assert step(vec(i, 1, 2, 3, 4)).item() == 11400 + 200 * i
    assert len(distinct_bases(step)) == 2
