"""Stage 9 (engine): device graphs. A device that can launch many kernels as one unit names a GraphRunner subclass as
its `graph`; `apply_graph_to_jit` groups runs of a TinyJit's captured kernels that the graph supports into one
GraphRunner item each. Entry point: `apply_graph_to_jit(jit_cache, input_buffers, var_vals)`.
"""

from __future__ import annotations

import functools
import time

from fusegrad.device import Buffer, Compiled, Device
from fusegrad.engine.realize import BufferCopy, BufferXfer, CompiledRunner, ExecItem, Runner, ViewOp
from fusegrad.helpers import colored, dedup
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp


class GraphException(Exception):  # noqa: N818  # the reference's name
    """A device's graph runner declining a batch; the batch's items then run one by one."""


# *** graph runners: a batch of captured kernels replayed as one runner ***


def get_input_replace(jit_cache: list[ExecItem], input_buffers: list[Buffer]) -> dict[tuple[int, int], int]:
    """{(item, slot): index in input_buffers} for every slot that holds one of the input buffers (by identity)."""
    index = {id(b): k for k, b in enumerate(input_buffers)}
    return {(j, i): index[id(b)] for j, ei in enumerate(jit_cache) for i, b in enumerate(ei.bufs) if id(b) in index}


class GraphRunner(Runner):
    """Runs a batch of captured ExecItems as one step: `runner(input_buffers, var_vals)` puts the call's inputs into
    the slots they fill (`input_replace`), launches every kernel in order, then lets go of the inputs. A device opts
    in by naming a subclass as its `graph` (a backend overrides `__call__` to launch the batch natively);
    `supports_exec_item` says which items a batch may hold."""

    def __init__(self, jit_cache: list[ExecItem], input_buffers: list[Buffer], var_vals: dict[str, int]) -> None:
        from fusegrad.renderer import Estimates

        if not jit_cache or any(ei.prg is None for ei in jit_cache):
            raise GraphException("graph: expected a non-empty batch of lowered ExecItems")
        self.jit_cache = jit_cache
        self.input_replace = get_input_replace(jit_cache, input_buffers)
        self.vars = sorted(var_vals)
        estimates = Estimates()
        for ei in jit_cache:
            assert ei.prg is not None, "graph: an item without a runner"
            estimates += ei.prg.estimates
        first = jit_cache[0].prg
        assert first is not None, "graph: an item without a runner"
        super().__init__(colored(f"<batched {len(jit_cache)}>", "cyan"), first.device, estimates.simplify())

    @property
    def inputs(self) -> list[int]:
        return sorted(set(self.input_replace.values()))

    @property
    def outputs(self) -> list[int]:
        return []

    def __call__(self, rawbufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        for (j, i), k in self.input_replace.items():
            self.jit_cache[j].bufs[i] = rawbufs[k]
        start = time.perf_counter()
        try:
            for ei in self.jit_cache:
                assert ei.prg is not None, "graph: an item without a runner"
                ei.prg(ei.bufs, var_vals | ei.fixedvars)  # type: ignore[arg-type]  # every input slot was just filled
        finally:
            for j, i in self.input_replace:
                self.jit_cache[j].bufs[i] = None  # don't keep the caller's memory alive
        if not wait:
            return None
        Device[self.device].synchronize()
        return time.perf_counter() - start

    @staticmethod
    def supports_exec_item(devs: list[Compiled], ei: ExecItem) -> bool:
        """A compiled kernel, and the batch stays on one device."""
        return isinstance(ei.prg, CompiledRunner) and len(dedup(devs)) == 1


class MultiGraphRunner(GraphRunner):
    """A graph runner whose batches may span several devices of one type, transfers between them included."""

    @staticmethod
    def supports_exec_item(devs: list[Compiled], ei: ExecItem) -> bool:
        if not isinstance(ei.prg, (CompiledRunner, BufferXfer)):
            return False
        return len(dedup([type(Device[b.device]) for b in ei.bufs if b is not None] + [type(d) for d in devs])) == 1


def graph_class(dev: Compiled) -> type[GraphRunner] | None:
    """The GraphRunner subclass a device batches captured kernels with (its `graph`, unwrapping a partial), or None."""
    graph = dev.graph.func if isinstance(dev.graph, functools.partial) else dev.graph
    return graph if isinstance(graph, type) and issubclass(graph, GraphRunner) else None


def _graph_device(ei: ExecItem) -> Compiled | None:
    """The device whose graph could run this item: a kernel's, a transfer's destination, a copy's non-CPU side."""
    match ei.prg:
        case CompiledRunner():
            return ei.prg.dev
        case BufferXfer():
            return Device[ei.prg.device]
        case BufferCopy():
            return next((Device[b.device] for b in ei.bufs if b is not None and b.device != "CPU"), None)
    return None


def apply_graph_to_jit(
    jit_cache: list[ExecItem], input_buffers: list[Buffer], var_vals: dict[str, int], max_batch_size: int = 0
) -> list[ExecItem]:
    """Group runs of consecutive items that one device graph supports into GraphRunner items (a batch of one stays as
    it is; each batch may hold `max_batch_size` items, doubling after each, 0: no limit). The graph items take
    `input_buffers` as their buffers; ViewOps are dropped (their check ran at capture)."""
    graphed: list[ExecItem] = []
    batch: list[ExecItem] = []
    batch_devs: list[Compiled] = []

    def flush() -> None:
        nonlocal max_batch_size
        graph_t = graph_class(batch_devs[0]) if batch_devs else None
        try:
            if graph_t is None or len(batch) <= 1:
                raise GraphException("a graph needs a device graph and two items or more")
            runner = graph_t(list(batch), input_buffers, var_vals)
            for j, i in runner.input_replace:
                runner.jit_cache[j].bufs[i] = None  # the graph fills these on each call
            bufs: list[Buffer | None] = list(input_buffers)
            graphed.append(ExecItem(UOp(Ops.NOOP), bufs, prg=runner))
            max_batch_size *= 2
        except GraphException:
            graphed.extend(batch)
        batch.clear()
        batch_devs.clear()

    for ei in jit_cache:
        if isinstance(ei.prg, ViewOp):
            continue
        dev = _graph_device(ei)
        if dev is None or (graph_t := graph_class(dev)) is None or not graph_t.supports_exec_item([dev], ei):
            if batch:
                flush()
            graphed.append(ei)  # runs on its own
            continue
        batch_graph = graph_class(batch_devs[0]) if batch_devs else None
        fits = batch_graph is not None and batch_graph.supports_exec_item(dedup([*batch_devs, dev]), ei)
        if batch and not (fits and (max_batch_size == 0 or len(batch) < max_batch_size)):
            flush()
        batch.append(ei)
        batch_devs[:] = dedup([*batch_devs, dev])
    if batch:
        flush()
    return graphed
