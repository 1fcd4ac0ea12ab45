"""codegen/opt.py UPCAST_CLAMP: an upcast by an amount that needn't divide its axis; the last tile's lanes past the end
repeat the axis's last index, so every output gets the unoptimised kernel's bits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad.codegen import KernelInfo, to_program
from fusegrad.codegen.opt import Opt, OptOps, apply_opts
from fusegrad.device import Device
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import Context
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp
from test.codegen.test_opt import Case, data, glob, loop, matmul, red, run

F32 = dtypes.float32


def column_sums(rows: int, cols: int, dt: DType) -> Case:
    """out (cols,) = sum over rows of x (rows, cols), times 2: one output axis, reduced over the other."""
    r0, r1 = loop(cols, 0), red(rows, 1)
    value = glob(1, rows * cols, dt).index(r1 * cols + r0).load()
    ast = UOp.sink(glob(0, cols, dt).index(r0).store(value.reduce(r1, arg=Ops.ADD) * UOp.const(dt, 2)))
    x = data((rows, cols), dt)
    return ast, [x], (x.astype(np.float64).sum(axis=0) * 2).ravel()


def scaled_add(rows: int, cols: int, dt: DType) -> Case:
    """out (rows, cols) = a * 3 + b.T: elementwise, no reduce."""
    r0, r1 = loop(rows, 0), loop(cols, 1)
    a = glob(1, rows * cols, dt).index(r0 * cols + r1).load()
    b = glob(2, rows * cols, dt).index(r1 * rows + r0).load()
    ast = UOp.sink(glob(0, rows * cols, dt).index(r0 * cols + r1).store(a * UOp.const(dt, 3) + b))
    x, y = data((rows, cols), dt), data((cols, rows), dt, 1)
    return ast, [x, y], (x * 3 + y.T).ravel()


@st.composite
def clamped_kernel(draw: st.DrawFn) -> tuple[str, tuple[int, ...], tuple[Opt, ...]]:
    """A small kernel and a random UPCAST_CLAMP of one output axis (any amount below its size), maybe an UPCAST of
    the other output axis first or after it, and for a matmul maybe a PACK of b across the rows left."""
    kind = draw(st.sampled_from(["matmul", "column_sums", "scaled_add"]))
    m, k, n = draw(st.integers(2, 13)), draw(st.integers(1, 9)), draw(st.sampled_from([3, 8, 16, 24]))
    sizes, axes = (
        ((m, k, n), {0: m, 1: n}) if kind == "matmul" else ((m, n), {0: n} if kind == "column_sums" else {0: m, 1: n})
    )
    axis = draw(st.sampled_from(sorted(axes)))
    clamp = Opt(OptOps.UPCAST_CLAMP, axis, draw(st.integers(2, max(2, axes[axis] - 1))))
    opts = [clamp]
    others = [a for a in axes if a != axis and axes[a] % 2 == 0]
    if others and draw(st.booleans()):
        other = Opt(OptOps.UPCAST, others[0], draw(st.sampled_from([d for d in (2, 4, 8) if axes[others[0]] % d == 0])))
        opts.insert(draw(st.integers(0, 1)), other)
    if kind == "matmul" and sizes[1] > 1 and axis == 0 and axes[0] > clamp.arg and draw(st.booleans()):
        opts.append(Opt(OptOps.PACK, 0, 2))  # b's panel, outside the row tiles
    return kind, sizes, tuple(opts)


KERNELS = {"matmul": matmul, "column_sums": column_sums, "scaled_add": scaled_add}


@settings(max_examples=30, deadline=None)
@given(clamped_kernel())
def test_random_clamped_upcasts_keep_results_bit_for_bit(case: tuple[str, tuple[int, ...], tuple[Opt, ...]]) -> None:
    kind, sizes, opts = case
    for dt in (F32, dtypes.int32):
        ast, inputs, expected = KERNELS[kind](*sizes, dt)
        with Context(NOOPT=1):
            plain = run(ast, inputs, expected.size, dt, "PYTHON")
        for device in ("CPU", "PYTHON"):
            got = run(ast.replace(arg=KernelInfo(opts_to_apply=opts)), inputs, expected.size, dt, device)
            np.testing.assert_array_equal(got, plain, err_msg=f"{device} {dt} {opts}")


def test_rows_past_the_end_repeat_the_last_row() -> None:
    ast = matmul(7, 3, 8, F32)[0]
    clamped = apply_opts(ast, (Opt(OptOps.UPCAST_CLAMP, 0, 3),))
    ranges = {u.arg: int(u.src[0].arg) for u in clamped.toposort() if u.op is Ops.RANGE}
    assert ranges[(0, AxisType.LOOP)] == 3  # ceil(7 / 3) tiles of 3 rows: the last one rows 6, 6, 6
    assert ranges[(3, AxisType.UPCAST)] == 3
    src = to_program(
        ast.replace(arg=KernelInfo(opts_to_apply=(Opt(OptOps.UPCAST_CLAMP, 0, 3),))), Device["CPU"].renderer
    ).src
    assert "?alu2:6)*3)]" in src, src  # a's row min(3 * tile + row, 6): the simplifier's `tile < 2 ? row : 6`


def test_an_amount_that_divides_is_upcast() -> None:
    ast = matmul(8, 3, 8, F32)[0]
    assert apply_opts(ast, (Opt(OptOps.UPCAST_CLAMP, 0, 4),)) is apply_opts(ast, (Opt(OptOps.UPCAST, 0, 4),))


def accumulate(n: int, dt: DType) -> UOp:
    """out[i] += x[i]: reads the buffer it writes."""
    r0 = loop(n, 0)
    out = glob(0, n, dt)
    return UOp.sink(out.index(r0).store(out.index(r0).load() + glob(1, n, dt).index(r0).load()))


def test_bad_clamps_are_refused() -> None:
    ast = matmul(7, 5, 8, F32)[0]
    with pytest.raises(ValueError, match="needs a LOOP axis"):
        apply_opts(ast, (Opt(OptOps.UPCAST_CLAMP, 2, 2),))  # the reduce
    with pytest.raises(ValueError, match=r"got size 7, expected 2 <= arg < n"):
        apply_opts(ast, (Opt(OptOps.UPCAST_CLAMP, 0, 9),))
    with pytest.raises(ValueError, match=r"got size 7, expected 2 <= arg < n"):
        apply_opts(ast, (Opt(OptOps.UPCAST_CLAMP, 0, 1),))
    with pytest.raises(ValueError, match="GROUP or PACK applied before it"):
        apply_opts(ast, (Opt(OptOps.PACK, 0, 2), Opt(OptOps.UPCAST_CLAMP, 0, 3)))
    with pytest.raises(ValueError, match=r"reading buffers it writes \[0\]"):
        apply_opts(accumulate(7, F32), (Opt(OptOps.UPCAST_CLAMP, 0, 3),))
