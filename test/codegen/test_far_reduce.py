"""codegen/opt.py far_reduce_opts: a short reduce loop whose loads stride far along it (a sum of per-image partials, a
whole partial apart) is unrolled whole instead of left to a `simd reduction` that gathers its lanes; contiguous or
nearby loads keep their loop. Results are checked bit for bit against the plain kernel interpreted on PYTHON."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad.codegen import to_program
from fusegrad.codegen.opt import Opt, OptOps, hand_coded_opts
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import Context
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym
from test.codegen.test_opt import Case, data, glob, loop, red, run, with_opts


def partials_sum(rows: int, cols: int, parts: int, step: int, dt: DType) -> Case:
    """out (rows, cols) = bias + sum over p of x[p * step + r * cols + c]: `parts` partial results `step` elements
    apart (step >= rows * cols: whole partials, as a conv weight gradient's per-image ones; 1: interleaved)."""
    r, c, p = loop(rows, 0), loop(cols, 1), red(parts, 2)
    size = (parts - 1) * step + rows * cols
    partial = glob(2, size, dt).index(p * step + r * cols + c).load()
    bias = glob(1, rows * cols, dt).index(r * cols + c).load()
    ast = UOp.sink(glob(0, rows * cols, dt).index(r * cols + c).store(bias + partial.reduce(p, arg=Ops.ADD)))
    biases, xs = data((rows * cols,), dt), data((size,), dt, 1)
    at = np.arange(parts)[:, None] * step + np.arange(rows * cols)[None, :]
    return ast, [biases, xs], biases.astype(np.float64) + xs.astype(np.float64)[at].sum(0)


def test_a_sum_of_whole_partials_unrolls_its_loop() -> None:
    # the bench conv's weight gradient r_64_64_3_3_8 (8 partials 36864 floats apart): a simd reduction of gathers 139
    # us, unrolled 65 us single-thread
    ast = partials_sum(64 * 64 * 3, 3, 8, 64 * 64 * 9, dtypes.float32)[0]
    assert hand_coded_opts(ast) == [Opt(OptOps.UNROLL, 2, 8)]
    src = to_program(with_opts(ast, (Opt(OptOps.UNROLL, 2, 8),)), ClangRenderer()).src
    assert "simd reduction" not in src
    assert "#pragma GCC unroll 8" in src


def test_contiguous_or_long_reduces_keep_their_loop() -> None:
    # stride 1 along the loop: a simd reduction of plain vector loads
    assert not any(o.op is OptOps.UNROLL for o in hand_coded_opts(partials_sum(4, 3, 8, 1, dtypes.float32)[0]))
    # past SHORT_REDUCE steps: left to the loop
    assert not any(o.op is OptOps.UNROLL for o in hand_coded_opts(partials_sum(4, 3, 32, 48, dtypes.float32)[0]))


@settings(max_examples=15, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 5),
    st.integers(2, 16),
    st.sampled_from([0, 1, 5]),
    st.sampled_from([dtypes.float32, dtypes.float64]),
)
def test_any_partials_sum_runs_bit_for_bit_as_the_plain_kernel(
    rows: int, cols: int, parts: int, extra: int, dt: DType
) -> None:
    """Whatever the sizes, the heuristic's opts (UNROLL where the partials lie whole apart) sum each output in order:
    the plain kernel's bits on CPU and PYTHON."""
    ast, inputs, expected = partials_sum(rows, cols, parts, rows * cols + extra, dt)
    opts = tuple(hand_coded_opts(graph_rewrite(ast, sym)))
    with Context(NOOPT=1):
        plain = run(ast, inputs, expected.size, dt, "PYTHON")
    np.testing.assert_allclose(plain.astype(np.float64), expected, rtol=1e-5, atol=1e-5)
    for device in ("CPU", "PYTHON"):
        got = run(with_opts(ast, opts), inputs, expected.size, dt, device)
        if opts:
            np.testing.assert_array_equal(got, plain, err_msg=f"{device} {opts}")
        else:  # a plain reduce loop: C may sum it in SIMD lanes
            np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5, err_msg=f"{device} {opts}")
