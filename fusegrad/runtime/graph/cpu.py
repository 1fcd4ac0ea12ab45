"""The CPU device's graph: a TinyJit batch of C kernels (and CPU -> CPU:n transfers) replayed by one generated C
function that calls every kernel in order, so a replay costs one ctypes call instead of one per kernel.

The generated function reads three tables: kernel function pointers, buffer addresses and variable values. The source
depends only on the batch's structure (which table entry each argument reads), so its binary is cached on disk like
any kernel's; a replay rewrites only the entries of the call's input buffers and variables. The graph holds the program
objects behind the function table, so their libraries stay loaded as long as it can call them.
Entry point: `CPUDevice(...).graph` is `CPUGraph`; `engine.graph.apply_graph_to_jit` builds it.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from dataclasses import dataclass

from fusegrad.device import Buffer, Device
from fusegrad.engine.graph import GraphException, MultiGraphRunner
from fusegrad.engine.realize import BufferXfer, CompiledRunner, DirectLaunch, ExecItem
from fusegrad.helpers import PROFILE
from fusegrad.runtime.ops_cpu import CPUProgram, host_address
from fusegrad.uop.ops import UOp
from fusegrad.uop.symbolic_shape import check_bind

GRAPH_FUNCTION = "fusegrad_graph"


@dataclass(frozen=True, slots=True)
class GraphValue:
    """One entry of the values table: a kernel variable, with the value its item fixed at capture (else the call's)."""

    var: UOp
    fixed: int | None


def buffer_address(buf: Buffer) -> int:
    """Address of a host buffer's first byte (0 for an empty one: the kernel never reads it)."""
    try:
        return host_address(buf)
    except TypeError:
        raise GraphException(f"CPU graph: buffer on {buf.device} is not host memory") from None


class GraphSource:
    """Builds the generated C function: one line per item, each argument an index into the buffer or value table."""

    def __init__(self, input_replace: dict[tuple[int, int], int]) -> None:
        self.input_replace = input_replace
        self.buffer_entries: dict[int, int] = {}  # id(Buffer) -> entry, for buffers fixed at capture
        self.fixed_buffers: list[tuple[int, Buffer]] = []
        self.input_entries: dict[int, int] = {}  # input index -> entry, rewritten at every call
        self.values: dict[GraphValue, int] = {}
        self.functions: list[int] = []
        self.programs: list[object] = []  # what owns each function address: held so no kernel unloads while called
        self.lines: list[str] = []

    def entry(self, j: int, i: int, buf: Buffer | None) -> int:
        if (k := self.input_replace.get((j, i))) is not None:
            return self.input_entries.setdefault(k, len(self.buffer_entries) + len(self.input_entries))
        assert buf is not None, "CPU graph: an empty slot that is not an input"
        if id(buf) not in self.buffer_entries:
            self.buffer_entries[id(buf)] = len(self.buffer_entries) + len(self.input_entries)
            self.fixed_buffers.append((self.buffer_entries[id(buf)], buf))
        return self.buffer_entries[id(buf)]

    def add_kernel(self, j: int, ei: ExecItem, runner: CompiledRunner) -> None:
        fxn = getattr(runner._prg, "fxn", None)
        if fxn is None:
            raise GraphException(f"CPU graph: {runner.program.name} is not a loaded C kernel")
        args = [f"b[{self.entry(j, slot, ei.bufs[slot])}]" for slot in runner.program.globals]
        for v in runner.program.vars:
            value = GraphValue(v, ei.fixedvars.get(v.expr))
            args.append(f"v[{self.values.setdefault(value, len(self.values))}]")
        signature = (
            ", ".join(["void*"] * len(runner.program.globals) + ["long long"] * len(runner.program.vars)) or "void"
        )
        self.lines.append(f"  ((void (*)({signature}))f[{len(self.functions)}])({', '.join(args)});")
        self.functions.append(ctypes.cast(fxn, ctypes.c_void_p).value or 0)
        self.programs.append(runner._prg)

    def add_transfer(self, j: int, ei: ExecItem) -> None:
        dest, src = ei.bufs[0], ei.bufs[1]
        assert dest is not None, "CPU graph: a transfer without a destination"
        assert src is not None, "CPU graph: a transfer without a source"
        if dest.nbytes != src.nbytes:
            raise GraphException(f"CPU graph: transfer of {src.nbytes} bytes into {dest.nbytes}")
        self.lines.append(
            f"  __builtin_memcpy(b[{self.entry(j, 0, dest)}], b[{self.entry(j, 1, src)}], {dest.nbytes}ULL);"
        )

    def render(self) -> str:
        body = "\n".join(self.lines)
        return f"void {GRAPH_FUNCTION}(void **f, void **b, const long long *v) {{\n{body}\n}}\n"


class CPUGraph(MultiGraphRunner):
    """Replays a batch of CPU kernels and CPU -> CPU:n transfers through one compiled C call. With PROFILE on it runs
    them one by one instead, so the timeline shows every kernel."""

    def __init__(self, jit_cache: list[ExecItem], input_buffers: list[Buffer], var_vals: dict[str, int]) -> None:
        super().__init__(jit_cache, input_buffers, var_vals)
        source = GraphSource(self.input_replace)
        for j, ei in enumerate(jit_cache):
            match ei.prg:
                case CompiledRunner():
                    source.add_kernel(j, ei, ei.prg)
                case BufferXfer():
                    source.add_transfer(j, ei)
                case _:
                    raise GraphException(f"CPU graph: can't batch a {type(ei.prg).__name__}")
        dev = Device[self.device]
        self.src = source.render()
        self._program = CPUProgram(dev, GRAPH_FUNCTION, dev.compiler.compile_cached(self.src))
        self._fxn = self._program.fxn
        self._fxn.argtypes = [ctypes.c_void_p] * 3
        self._functions = (ctypes.c_void_p * max(1, len(source.functions)))(*source.functions)
        # the table holds bare addresses: the programs behind them stay loaded while this graph lives (an evicted
        # runner cache entry or a freed jit_cache item must not unload a kernel the generated function calls)
        self._programs = source.programs
        self._addresses = (ctypes.c_void_p * max(1, len(source.buffer_entries) + len(source.input_entries)))()
        for entry, buf in source.fixed_buffers:
            self._addresses[entry] = buffer_address(buf)
        self._input_entries = list(source.input_entries.items())
        self._values_used = list(source.values)
        self._values = (ctypes.c_int64 * max(1, len(self._values_used)))()

    def __call__(self, rawbufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        if PROFILE:
            return super().__call__(rawbufs, var_vals, wait)
        for k, entry in self._input_entries:
            self._addresses[entry] = buffer_address(rawbufs[k])
        for n, value in enumerate(self._values_used):
            self._values[n] = self._value(value, var_vals)
        start = time.perf_counter()
        self._fxn(self._functions, self._addresses, self._values)
        return time.perf_counter() - start if wait else None

    def direct_launch(self, bufs: Sequence[Buffer | None], inputs: dict[int, int]) -> DirectLaunch | None:
        """The generated function with its tables, the call's inputs written into the address table; None when a
        kernel variable takes each call's value."""
        for n, value in enumerate(self._values_used):
            if value.fixed is None:
                return None
            self._values[n] = value.fixed
        subs = tuple((entry, k) for k, entry in self._input_entries)
        return DirectLaunch(
            self._fxn, [self._functions, self._addresses, self._values], self._addresses, subs, host_address
        )

    @staticmethod
    def _value(value: GraphValue, var_vals: dict[str, int]) -> int:
        if value.fixed is not None:
            return value.fixed
        if (given := var_vals.get(value.var.expr)) is None:
            raise ValueError(f"CPU graph: no value for variable {value.var.expr!r}: got values for {sorted(var_vals)}")
        check_bind(value.var, given)  # the kernel was simplified for the variable's range
        return given
