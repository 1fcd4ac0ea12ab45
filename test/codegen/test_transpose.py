"""codegen/opt.py transpose_opts: an elementwise kernel that stores along its innermost loop while a load steps far
along it (a transposed read) has the outer loop that load is contiguous in upcast by TRANSPOSE_ROWS."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad import Tensor
from fusegrad.codegen import KernelInfo, simplify_indexing, to_program
from fusegrad.codegen.opt import TRANSPOSE_ROWS, Opt, OptOps, hand_coded_opts
from fusegrad.dtype import dtypes
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp
from test.codegen.test_opt import Case, data, glob, loop, run

F32 = dtypes.float32


def transposed(rows: int, cols: int, offset: float = 1.0) -> Case:
    """out (rows, cols) = x.T + offset for x of (cols, rows): the store runs along the columns, the load steps a row
    of x per column."""
    r, c = loop(rows, 0), loop(cols, 1)
    value = glob(1, rows * cols, F32).index(c * rows + r).load() + offset
    ast = UOp.sink(glob(0, rows * cols, F32).index(r * cols + c).store(value))
    xs = data((cols, rows), F32)
    return ast, [xs], (xs.T + np.float32(offset)).astype(np.float64).ravel()


def kernel(t: Tensor) -> UOp:
    (ast,) = [i.ast for i in t.schedule() if i.ast.op is Ops.SINK]
    return simplify_indexing(ast)


def test_a_transposed_copy_upcasts_the_loop_its_load_is_contiguous_in() -> None:
    assert TRANSPOSE_ROWS == 8
    assert hand_coded_opts(transposed(64, 48)[0]) == [Opt(OptOps.UPCAST, 0, 8)]
    x = Tensor.randn(16, 32, 24).realize()
    # (16, 32, 24) -> (24, 16, 32): the load is contiguous along the output's last-but-two loop, which merges with
    # the next (x's 16 and 32 are adjacent): (24, 512) transposed
    assert hand_coded_opts(kernel(x.permute(2, 0, 1).contiguous())) == [Opt(OptOps.UPCAST, 0, 8)]
    np.testing.assert_array_equal(x.permute(2, 0, 1).contiguous().numpy(), x.numpy().transpose(2, 0, 1))
    # the 8 rows are vectorised: the loop over them is the innermost `omp simd` loop
    src = to_program(transposed(64, 48)[0].replace(arg=KernelInfo()), ClangRenderer()).src
    lines = [line.strip() for line in src.splitlines()]
    assert lines[lines.index("#pragma omp simd") + 1].endswith("< 8; ridx2++) {")


def test_kernels_that_are_no_transposed_copy_keep_their_opts() -> None:
    x = Tensor.randn(64, 48).realize()
    assert hand_coded_opts(kernel(x + 1)) == []  # contiguous: the compiler's vector loop already
    assert hand_coded_opts(transposed(8, 48)[0]) == []  # 8 rows: loads 8 floats apart, two to a cache line
    assert hand_coded_opts(transposed(60, 48)[0]) == []  # 60 rows: no whole tile of 8
    r, c = loop(64, 0), loop(48, 1)  # gated (a pad's zeros): left as it was
    gated = (c < 40).where(glob(1, 64 * 48, F32).index(c * 64 + r, c < 40).load(), 0.0)
    assert hand_coded_opts(UOp.sink(glob(0, 64 * 48, F32).index(r * 48 + c).store(gated))) == []


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 4), st.integers(1, 40), st.sampled_from([0.0, 1.0, -2.5]))
def test_any_transposed_copy_runs_bit_for_bit_as_the_plain_kernel(tiles: int, cols: int, offset: float) -> None:
    """Whatever the sizes, the heuristic's opts give the plain kernel's outputs bit for bit (elementwise: no order to
    change), on CPU and interpreted on PYTHON."""
    ast, inputs, expected = transposed(tiles * TRANSPOSE_ROWS, cols, offset)
    opts = tuple(hand_coded_opts(ast))
    plain = run(ast.replace(arg=KernelInfo(opts_to_apply=())), inputs, expected.size, F32, "PYTHON")
    np.testing.assert_array_equal(plain.astype(np.float64), expected)
    for device in ("CPU", "PYTHON"):
        got = run(ast.replace(arg=KernelInfo(opts_to_apply=opts)), inputs, expected.size, F32, device)
        np.testing.assert_array_equal(got, plain, err_msg=f"{device} {opts}")
