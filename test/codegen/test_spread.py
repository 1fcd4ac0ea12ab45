"""codegen/opt.py spread_opts: an elementwise kernel reading its innermost loop x as x // c (a max pool's gradient over
its windows) upcast by c; and the C renderer's pragmas for that short upcast (renderer/cstyle.py _spread_pragmas)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad.codegen import KernelInfo, to_program
from fusegrad.codegen.opt import Opt, OptOps, hand_coded_opts
from fusegrad.dtype import dtypes
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym
from test.codegen.test_opt import Case, data, glob, loop, run

F32 = dtypes.float32


def spread(rows: int, width: int, step: int) -> Case:
    """out (rows, width) = (x == m[x // step]) * g[x // step] / n[x // step] per row: a max pool's gradient along one
    axis, each pooled value spread over `step` inputs (m, g, n of (rows, width // step))."""
    r, x = loop(rows, 0), loop(width, 1)
    pooled = width // step
    inp = glob(1, rows * width, F32).index(r * width + x).load()
    m, g, n = (glob(slot, rows * pooled, F32).index(r * pooled + x // step).load() for slot in (2, 3, 4))
    value = inp.eq(m).cast(F32) * (g * n.reciprocal())
    ast = UOp.sink(glob(0, rows * width, F32).index(r * width + x).store(value))
    xs = data((rows, width), F32)
    ms = np.where(data((rows, pooled), F32, 4) > 0, xs[:, ::step], 0.5).astype(np.float32)  # some equal, some not
    gs, ns = data((rows, pooled), F32, 2), np.abs(data((rows, pooled), F32, 3)) + 1
    expected = (xs == np.repeat(ms, step, 1)) * np.repeat(gs * (1 / ns), step, 1)
    return ast, [xs, ms, gs, ns.astype(np.float32)], expected.astype(np.float64).ravel()


def test_a_pool_gradients_spread_loop_is_upcast_by_its_window() -> None:
    # 26 columns read at x // 2: the pair shares m, g and 1/n (the convnet's pool backward 0.50 -> 0.30 ms)
    assert hand_coded_opts(spread(4, 26, 2)[0]) == [Opt(OptOps.UPCAST, 1, 2)]
    assert hand_coded_opts(spread(4, 24, 3)[0]) == [Opt(OptOps.UPCAST, 1, 3)]
    # 10 columns by 2 leave 5 for the vector lanes: no upcast (it ran 10% slower as 5 scalar pairs)
    assert hand_coded_opts(spread(4, 10, 2)[0]) == []
    # a window of 8 or more is left to the C compiler's own vectorisation
    assert hand_coded_opts(spread(4, 64, 8)[0]) == []


def test_the_spread_pair_is_unrolled_inside_a_simd_loop() -> None:
    src = to_program(spread(4, 26, 2)[0].replace(arg=KernelInfo()), ClangRenderer()).src
    lines = [line.strip() for line in src.splitlines()]
    simd = lines.index("#pragma omp simd")
    assert lines[simd + 1].endswith("< 13; ridx1++) {")  # the pairs' loop takes the lanes
    unroll = lines.index("#pragma GCC unroll 2")
    assert unroll > simd
    assert lines[unroll + 1].endswith("< 2; ridx2++) {")


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 3), st.integers(1, 12), st.integers(2, 4))
def test_any_spread_runs_bit_for_bit_as_the_plain_kernel(rows: int, pooled: int, step: int) -> None:
    """Whatever the sizes, the heuristic's opts (the upcast where it applies) give the plain kernel's outputs bit for
    bit (elementwise: no order to change), on CPU and interpreted on PYTHON."""
    ast, inputs, expected = spread(rows, pooled * step, step)
    opts = tuple(hand_coded_opts(graph_rewrite(ast, sym)))
    plain = run(ast.replace(arg=KernelInfo(opts_to_apply=())), inputs, expected.size, F32, "PYTHON")
    np.testing.assert_allclose(plain.astype(np.float64), expected, rtol=1e-6)
    for device in ("CPU", "PYTHON"):
        got = run(ast.replace(arg=KernelInfo(opts_to_apply=opts)), inputs, expected.size, F32, device)
        np.testing.assert_array_equal(got, plain, err_msg=f"{device} {opts}")
