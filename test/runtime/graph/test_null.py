"""Tests for fusegrad/runtime/graph/null.py, NULL's graph runner: a TinyJit replay on NULL runs its kernels in
batches, one call each, and records one event per batch when profiling."""

from __future__ import annotations

from fusegrad import Device, Tensor, TinyJit
from fusegrad.engine.graph import MultiGraphRunner, graph_class
from fusegrad.helpers import Context, ProfileRangeEvent, cpu_events
from fusegrad.runtime.graph.null import NullGraph


def chain(x: Tensor) -> Tensor:
    for _ in range(8):
        x = (x + 1).realize()
    return x


def test_null_names_its_graph() -> None:
    assert graph_class(Device["NULL"]) is NullGraph
    assert issubclass(NullGraph, MultiGraphRunner)


def test_a_null_replay_runs_batches() -> None:
    step = TinyJit(chain)
    x = Tensor.ones(4, device="NULL").contiguous().realize()
    for _ in range(3):
        out = step(x)
    assert out.device == "NULL"
    assert out.shape == (4,)
    assert all(isinstance(ei.prg, NullGraph) for ei in step.jit_cache)
    assert sum(len(ei.prg.jit_cache) for ei in step.jit_cache) == 8  # type: ignore[union-attr]  # all graphs


def test_a_profiled_null_replay_records_one_event_per_batch() -> None:
    step = TinyJit(chain)
    x = Tensor.ones(4, device="NULL").contiguous().realize()
    for _ in range(2):
        step(x)
    cpu_events.clear()
    with Context(PROFILE=1, JIT_BATCH_SIZE=0):
        step(x)
    names = [e.name for e in cpu_events if isinstance(e, ProfileRangeEvent) and e.device == "NULL"]
    assert names == [ei.prg.display_name for ei in step.jit_cache]  # type: ignore[union-attr]  # graphs
    cpu_events.clear()
