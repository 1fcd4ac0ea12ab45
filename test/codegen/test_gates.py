"""The "simplify gates" pass (fusegrad/codegen/gates.py): gates tightened, indexes simplified given them, and values
that merely AND comparisons of gated loads left alone (they once made the pass loop forever)."""

from __future__ import annotations

import numpy as np

from fusegrad.codegen import full_rewrite, to_program
from fusegrad.codegen.gates import pm_simplify_gates
from fusegrad.device import Buffer
from fusegrad.dtype import DType, dtypes
from fusegrad.engine.realize import CompiledRunner
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym


def glob(slot: int, size: int, dt: DType = dtypes.float32) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dt.ptr(size), arg=slot)


def gate_and_gated_compare() -> UOp:
    """out[r0, r1] = (r1*2+1 < 7) & (x[r0, 2*r1+1] < x[r0, 2*r1]), x (2, 7) padded to (2, 8) on the right."""
    r0, r1 = UOp.range(2, 0, AxisType.LOOP), UOp.range(4, 1, AxisType.LOOP)
    x = glob(1, 14, dtypes.int32)
    right = x.index(r0 * 7 + r1 * 2 + 1, r1 < 3).load()
    left = x.index(r0 * 7 + r1 * 2).load()
    value = ((r1 * 2 + 1).cast(dtypes.int32) < 7) & (right < left)
    return UOp.sink(glob(0, 8, dtypes.bool).index(r0 * 4 + r1).store(value))


def test_value_and_of_gated_compare_reaches_a_fixed_point() -> None:
    sink = graph_rewrite(gate_and_gated_compare(), pm_simplify_gates, name="simplify gates")
    assert [u for u in sink.toposort() if u.op is Ops.AND], "the value's AND stays a value"
    assert full_rewrite(gate_and_gated_compare(), ClangRenderer())[-1].op is Ops.SINK


def test_value_and_of_gated_compare_runs_right() -> None:
    prg = to_program(gate_and_gated_compare(), ClangRenderer())
    x = np.arange(14, dtype=np.int32)[::-1].copy()  # descending: right < left wherever the right one is loaded
    out = Buffer("CPU", 8, dtypes.bool).allocate()
    inp = Buffer("CPU", 14, dtypes.int32).allocate().copyin(memoryview(x.tobytes()))
    CompiledRunner(prg)([out, inp], {}, wait=True)
    padded = np.pad(x.reshape(2, 7), ((0, 0), (0, 1))).reshape(2, 4, 2)
    expected = (np.arange(8).reshape(4, 2)[:, 1] < 7) & (padded[..., 1] < padded[..., 0])
    np.testing.assert_array_equal(out.numpy().reshape(2, 4), expected)


def test_gate_clauses_tightened_and_always_true_gate_dropped() -> None:
    r0 = UOp.range(8, 0, AxisType.LOOP)
    tight = glob(1, 8).index(r0, (r0 < 5) & (r0 < 7)).load()  # r0 < 7 follows from r0 < 5
    loose = glob(2, 8).index(r0, r0 < 8).load()  # always holds: sym folds it to True, the pass drops it
    sink = graph_rewrite(UOp.sink(glob(0, 8).index(r0).store(tight + loose)), sym)
    sink = graph_rewrite(sink, pm_simplify_gates)
    gates = [u.src[2] for u in sink.toposort() if u.op is Ops.INDEX and len(u.src) > 2]
    assert gates == [r0 < 5]
