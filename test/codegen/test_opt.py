"""Kernel opts (fusegrad/codegen/opt.py): every transformation run on the CPU and PYTHON devices against numpy and
against the same kernel without opts, on odd sizes and float32/float16/int32; what the heuristic picks; the C shape."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad import Tensor
from fusegrad.codegen import KernelInfo, full_rewrite, kernel_names, to_program
from fusegrad.codegen.opt import LANE_VECTORS, Opt, OptOps, hand_coded_opts, register_tile, stride
from fusegrad.codegen.search import extensions
from fusegrad.device import Buffer, Device
from fusegrad.dtype import DType, _to_np_dtype, dtypes
from fusegrad.engine.realize import CompiledRunner
from fusegrad.helpers import Context
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym

DEVICES = ["CPU", "PYTHON"]
PYTHON_WORK = 50_000  # output size x input size up to which a kernel is also interpreted without opts


@pytest.fixture(autouse=True)
def _fresh_kernel_names() -> None:
    kernel_names.clear()


def glob(slot: int, size: int, dt: DType) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dt.ptr(size), arg=slot)


def loop(end: int, axis: int) -> UOp:
    return UOp.range(end, axis, AxisType.LOOP)


def red(end: int, axis: int) -> UOp:
    return UOp.range(end, axis, AxisType.REDUCE)


def with_opts(ast: UOp, opts: tuple[Opt, ...] | None) -> UOp:
    return ast if opts is None else ast.replace(arg=KernelInfo(opts_to_apply=opts))


def run(ast: UOp, inputs: list[np.ndarray], out_size: int, dt: DType, device: str) -> np.ndarray:
    """The kernel run on `device`: inputs by slot from 1 (all of dtype `dt`), the output (slot 0) as a flat array."""
    prg = to_program(ast, Device[device].renderer)
    out = Buffer(device, out_size, dt).allocate()
    bufs = [Buffer(device, x.size, dt).allocate().copyin(memoryview(np.ascontiguousarray(x).ravel())) for x in inputs]
    CompiledRunner(prg)([out, *bufs], {}, wait=True)
    return out.numpy().copy()


def data(shape: tuple[int, ...], dt: DType, seed: int = 0) -> np.ndarray:
    rand = np.random.default_rng(seed)
    if dtypes.is_int(dt):
        return rand.integers(-5, 6, shape).astype(_to_np_dtype(dt))
    return rand.standard_normal(shape).astype(_to_np_dtype(dt))


# *** kernels: (AST, inputs, numpy reference of the output, output size) ***

Case = tuple[UOp, list[np.ndarray], np.ndarray]


def assert_plain_bits(case: Case, opts: list[Opt], device: str) -> None:
    """The float32 kernel of `case` with `opts` on `device` gives the plain kernel's bits (PYTHON, no opts): for opts
    that keep every sum's order (tiles, clamped rows, packed panels); and its values are numpy's to rounding."""
    ast, inputs, expected = case
    with Context(NOOPT=1):
        plain = run(ast, inputs, expected.size, dtypes.float32, "PYTHON")
    got = run(ast.replace(arg=KernelInfo(opts_to_apply=tuple(opts))), inputs, expected.size, dtypes.float32, device)
    np.testing.assert_array_equal(got, plain)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def matmul(m: int, k: int, n: int, dt: DType) -> Case:
    """out (m, n) = a (m, k) @ b (k, n)."""
    r0, r1, r2 = loop(m, 0), loop(n, 1), red(k, 2)
    product = glob(1, m * k, dt).index(r0 * k + r2).load() * glob(2, k * n, dt).index(r2 * n + r1).load()
    ast = UOp.sink(glob(0, m * n, dt).index(r0 * n + r1).store(product.reduce(r2, arg=Ops.ADD)))
    a, b = data((m, k), dt), data((k, n), dt, 1)
    return ast, [a, b], (a.astype(np.float64) @ b.astype(np.float64)).ravel()


def self_matmul(n: int, dt: DType) -> Case:
    """out (n, n) = a @ a: both operands load slot 1."""
    r0, r1, r2 = loop(n, 0), loop(n, 1), red(n, 2)
    a_buf = glob(1, n * n, dt)
    product = a_buf.index(r0 * n + r2).load() * a_buf.index(r2 * n + r1).load()
    ast = UOp.sink(glob(0, n * n, dt).index(r0 * n + r1).store(product.reduce(r2, arg=Ops.ADD)))
    a = data((n, n), dt)
    return ast, [a], (a.astype(np.float64) @ a.astype(np.float64)).ravel()


def matmul_transposed(m: int, k: int, n: int, dt: DType) -> Case:
    """out (m, n) = a (m, k) @ b (n, k).T: no load contiguous in an output axis."""
    r0, r1, r2 = loop(m, 0), loop(n, 1), red(k, 2)
    product = glob(1, m * k, dt).index(r0 * k + r2).load() * glob(2, k * n, dt).index(r1 * k + r2).load()
    ast = UOp.sink(glob(0, m * n, dt).index(r0 * n + r1).store(product.reduce(r2, arg=Ops.ADD)))
    a, b = data((m, k), dt), data((n, k), dt, 1)
    return ast, [a, b], (a.astype(np.float64) @ b.astype(np.float64).T).ravel()


def weight_gradient(m: int, k: int, n: int, dt: DType, block: int = 0, swapped: bool = False) -> Case:
    """out (m, n) = a (k, m).T @ b (k, n): both operands reduced over their outer axis (a Linear weight's gradient
    over the tokens). `block`: a stored as (m // block, k, block) (a gradient of heads read as rows: the rows' index
    has a div and a mod); `swapped`: the loop over the n columns outside the one over the m rows."""
    rows, cols, r = (loop(m, 1), loop(n, 0), red(k, 2)) if swapped else (loop(m, 0), loop(n, 1), red(k, 2))
    a_index = (rows // block) * (k * block) + r * block + rows % block if block else r * m + rows
    product = glob(1, k * m, dt).index(a_index).load() * glob(2, k * n, dt).index(r * n + cols).load()
    ast = UOp.sink(glob(0, m * n, dt).index(rows * n + cols).store(product.reduce(r, arg=Ops.ADD)))
    a, b = data((k, m), dt), data((k, n), dt, 1)
    stored = a.reshape(k, m // block, block).transpose(1, 0, 2) if block else a
    return ast, [stored, b], (a.astype(np.float64).T @ b.astype(np.float64)).ravel()


def conv1d(batch: int, cin: int, cout: int, width: int, dt: DType) -> Case:
    """out (batch, cout, width) = conv of x (batch, cin, width) padded by 1 on each side with w (cout, cin, 3)."""
    n, o, x, c, k = loop(batch, 0), loop(cout, 1), loop(width, 2), red(cin, 3), red(3, 4)
    pos = x + k - 1
    inp = glob(1, batch * cin * width, dt).index(n * (cin * width) + c * width + pos, (pos >= 0) & (pos < width))
    weight = glob(2, cout * cin * 3, dt).index(o * (cin * 3) + c * 3 + k)
    value = (inp.load() * weight.load()).reduce(c, k, arg=Ops.ADD)
    ast = UOp.sink(glob(0, batch * cout * width, dt).index(n * (cout * width) + o * width + x).store(value))
    xs, ws = data((batch, cin, width), dt), data((cout, cin, 3), dt, 1)
    padded = np.pad(xs.astype(np.float64), ((0, 0), (0, 0), (1, 1)))
    windows = np.stack([padded[:, :, i : i + width] for i in range(3)], -1)  # (batch, cin, width, 3)
    return ast, [xs, ws], np.einsum("ncxk,ock->nox", windows, ws.astype(np.float64)).ravel()


def conv1d_select(batch: int, cin: int, cout: int, width: int, dt: DType) -> Case:
    """conv1d with the pad as the scheduler writes it: valid.where(x[..., valid], 0), a gated load in a select."""
    n, o, x, c, k = loop(batch, 0), loop(cout, 1), loop(width, 2), red(cin, 3), red(3, 4)
    pos = x + k - 1
    valid = (pos >= 0) & (pos < width)
    inp = valid.where(glob(1, batch * cin * width, dt).index(n * (cin * width) + c * width + pos, valid).load(), 0)
    weight = glob(2, cout * cin * 3, dt).index(o * (cin * 3) + c * 3 + k)
    value = (inp * weight.load()).reduce(c, k, arg=Ops.ADD)
    ast = UOp.sink(glob(0, batch * cout * width, dt).index(n * (cout * width) + o * width + x).store(value))
    return ast, *conv1d(batch, cin, cout, width, dt)[1:]


def conv1d_strided(batch: int, cin: int, cout: int, width: int, step: int, pad: int, dt: DType) -> Case:
    """out (batch, cout, (width + 2 pad - 3) // step + 1) = conv of x (batch, cin, width) padded by `pad` on each side
    (a gated load; none without padding) with w (cout, cin, 3), its window moving `step` inputs per output."""
    out = (width + 2 * pad - 3) // step + 1
    n, o, x, c, k = loop(batch, 0), loop(cout, 1), loop(out, 2), red(cin, 3), red(3, 4)
    pos = x * step + k - pad
    source = glob(1, batch * cin * width, dt)
    at = n * (cin * width) + c * width + pos
    inp = source.index(at, (pos >= 0) & (pos < width)) if pad else source.index(at)
    weight = glob(2, cout * cin * 3, dt).index(o * (cin * 3) + c * 3 + k)
    value = (inp.load() * weight.load()).reduce(c, k, arg=Ops.ADD)
    ast = UOp.sink(glob(0, batch * cout * out, dt).index(n * (cout * out) + o * out + x).store(value))
    xs, ws = data((batch, cin, width), dt), data((cout, cin, 3), dt, 1)
    padded = np.pad(xs.astype(np.float64), ((0, 0), (0, 0), (pad, pad)))
    windows = np.stack([padded[:, :, i : i + step * (out - 1) + 1 : step] for i in range(3)], -1)
    return ast, [xs, ws], np.einsum("ncxk,ock->nox", windows, ws.astype(np.float64)).ravel()


def conv1d_pooled(batch: int, cin: int, cout: int, width: int, dt: DType) -> Case:
    """out (batch, cout) = conv1d's output summed over its columns: the conv's reduce inside the pool's (a global
    average pool fused over the last conv), so the output loops are only the batch and the channels."""
    n, o, x, c, k = loop(batch, 0), loop(cout, 1), red(width, 2), red(cin, 3), red(3, 4)
    pos = x + k - 1
    inp = glob(1, batch * cin * width, dt).index(n * (cin * width) + c * width + pos, (pos >= 0) & (pos < width))
    weight = glob(2, cout * cin * 3, dt).index(o * (cin * 3) + c * 3 + k)
    value = (inp.load() * weight.load()).reduce(c, k, arg=Ops.ADD).reduce(x, arg=Ops.ADD)
    ast = UOp.sink(glob(0, batch * cout, dt).index(n * cout + o).store(value))
    _, inputs, expected = conv1d(batch, cin, cout, width, dt)
    return ast, inputs, expected.reshape(batch, cout, width).sum(-1).ravel()


def row_sum_broadcast(batch: int, rows: int, width: int, dt: DType) -> Case:
    """out (batch, rows) = sum over c of x[b, t, c] + p[t, c] + y[b, t, c] (a fused residual stream's row sum before a
    layernorm: every load contiguous in the reduce, p broadcast over the batch)."""
    b, t, c = loop(batch, 0), loop(rows, 1), red(width, 2)
    x = glob(1, batch * rows * width, dt).index(b * (rows * width) + t * width + c).load()
    p = glob(2, rows * width, dt).index(t * width + c).load()
    y = glob(3, batch * rows * width, dt).index(b * (rows * width) + t * width + c).load()
    ast = UOp.sink(glob(0, batch * rows, dt).index(b * rows + t).store(((x + p) + y).reduce(c, arg=Ops.ADD)))
    xs, ps, ys = data((batch, rows, width), dt), data((rows, width), dt, 1), data((batch, rows, width), dt, 2)
    return ast, [xs, ps, ys], (xs.astype(np.float64) + ps + ys).sum(-1).ravel()


def pool1d_strided(batch: int, width: int, dt: DType) -> Case:
    """out (batch, (width - 1) // 2 + 1) = max over windows of 3 of x (batch, width) padded by 1 with -inf, stepping 2
    (a max pool's gated stride-2 load, as the scheduler writes it: valid.where(x[..., valid], -inf))."""
    out = (width - 1) // 2 + 1
    n, x, k = loop(batch, 0), loop(out, 1), red(3, 2)
    pos = x * 2 + k - 1
    valid = (pos >= 0) & (pos < width)
    value = valid.where(glob(1, batch * width, dt).index(n * width + pos, valid).load(), -math.inf)
    ast = UOp.sink(glob(0, batch * out, dt).index(n * out + x).store(value.reduce(k, arg=Ops.MAX)))
    xs = data((batch, width), dt)
    padded = np.pad(xs.astype(np.float64), ((0, 0), (1, 1)), constant_values=-np.inf)
    return ast, [xs], np.stack([padded[:, i : i + 2 * (out - 1) + 1 : 2] for i in range(3)], -1).max(-1).ravel()


def window_taps(batch: int, groups: int, width: int, dt: DType) -> Case:
    """out (batch, groups, width) = sum over 3 taps k of x (batch, width + 2, groups * 3)[n, x + k, g * 3]: a conv's
    input gradient window kernel once its channels and taps merged (schedule/merge.py): loads step by 3 along the
    merged axis g, which the output strides in by `width`."""
    n, g, x, k = loop(batch, 0), loop(groups, 1), loop(width, 2), red(3, 3)
    row = groups * 3
    value = glob(1, batch * (width + 2) * row, dt).index(n * ((width + 2) * row) + (x + k) * row + g * 3).load()
    ast = UOp.sink(glob(0, batch * groups * width, dt).index(n * (groups * width) + g * width + x).store(
        value.reduce(k, arg=Ops.ADD)))  # fmt: skip
    xs = data((batch, width + 2, row), dt)
    expected = np.stack([xs[:, i : i + width, 0::3].astype(np.float64) for i in range(3)]).sum(0).transpose(0, 2, 1)
    return ast, [xs], np.ascontiguousarray(expected).ravel()


def conv1d_prologue(batch: int, cin: int, cout: int, width: int, dt: DType) -> Case:
    """conv1d of relu(x + bias) (a batchnorm + relu fused into the next conv's input), padded by 1 after the relu:
    valid.where(max(x[..., valid] + b[c], 0), 0) times the weights."""
    n, o, x, c, k = loop(batch, 0), loop(cout, 1), loop(width, 2), red(cin, 3), red(3, 4)
    pos = x + k - 1
    valid = (pos >= 0) & (pos < width)
    raw = glob(1, batch * cin * width, dt).index(n * (cin * width) + c * width + pos, valid).load()
    shifted = raw + glob(3, cin, dt).index(c).load()
    inp = valid.where(shifted.maximum(shifted.const_like(0)), 0)
    weight = glob(2, cout * cin * 3, dt).index(o * (cin * 3) + c * 3 + k)
    value = (inp * weight.load()).reduce(c, k, arg=Ops.ADD)
    ast = UOp.sink(glob(0, batch * cout * width, dt).index(n * (cout * width) + o * width + x).store(value))
    xs, ws, bs = data((batch, cin, width), dt), data((cout, cin, 3), dt, 1), data((cin,), dt, 2)
    act = np.maximum(xs.astype(np.float64) + bs.astype(np.float64)[None, :, None], 0)
    padded = np.pad(act, ((0, 0), (0, 0), (1, 1)))
    windows = np.stack([padded[:, :, i : i + width] for i in range(3)], -1)
    return ast, [xs, ws, bs], np.einsum("ncxk,ock->nox", windows, ws.astype(np.float64)).ravel()


def max_columns(rows: int, cols: int, dt: DType) -> Case:
    """out (cols,) = a (rows, cols).max(0)."""
    r0, r1 = loop(cols, 0), red(rows, 1)
    value = glob(1, rows * cols, dt).index(r1 * cols + r0).load().reduce(r1, arg=Ops.MAX)
    a = data((rows, cols), dt)
    return UOp.sink(glob(0, cols, dt).index(r0).store(value)), [a], a.max(0).astype(np.float64)


def nested(rows: int, inner: int, cols: int, dt: DType) -> Case:
    """out (cols,) = sum_r a[r, j] * sum_s b[r, s, j]: a reduce inside a reduce, both per output column."""
    j, r, s = loop(cols, 0), red(rows, 1), red(inner, 2)
    inner_sum = glob(2, rows * inner * cols, dt).index(r * (inner * cols) + s * cols + j).load().reduce(s, arg=Ops.ADD)
    value = (glob(1, rows * cols, dt).index(r * cols + j).load() * inner_sum).reduce(r, arg=Ops.ADD)
    a, b = data((rows, cols), dt), data((rows, inner, cols), dt, 1)
    expected = (a.astype(np.float64) * b.astype(np.float64).sum(1)).sum(0)
    return UOp.sink(glob(0, cols, dt).index(j).store(value)), [a, b], expected


def broadcast_sum(batch: int, rows: int, cols: int, dt: DType) -> Case:
    """out (batch, cols) = a (rows, cols).sum(0) for every batch row: the reduce does not depend on axis 0."""
    n, j, r = loop(batch, 0), loop(cols, 1), red(rows, 2)
    value = glob(1, rows * cols, dt).index(r * cols + j).load().reduce(r, arg=Ops.ADD)
    a = data((rows, cols), dt)
    expected = np.broadcast_to(a.astype(np.float64).sum(0), (batch, cols)).ravel()
    return UOp.sink(glob(0, batch * cols, dt).index(n * cols + j).store(value)), [a], expected


def full_sum(size: int, dt: DType) -> Case:
    r0 = red(size, 0)
    value = glob(1, size, dt).index(r0).load().reduce(r0, arg=Ops.ADD)
    a = data((size,), dt)
    return (
        UOp.sink(glob(0, 1, dt).index(UOp.const(dtypes.index, 0)).store(value)),
        [a],
        a.astype(np.float64).sum().reshape(1),
    )


def check(case: Case, dt: DType, device: str, opts: tuple[Opt, ...] | None, exact: bool = False) -> None:
    """Against numpy (dtype-aware tolerance) and, with `exact` (or an int dtype), bit for bit against the PYTHON
    device running the kernel without opts, one op at a time in order: upcasts keep every accumulator's order. A
    GROUP reorders a sum, and so does the C of a plain reduce loop (`simd reduction`): those get a tolerance only."""
    ast, inputs, expected = case
    got = run(with_opts(ast, opts), inputs, expected.size, dt, device)
    tolerance = {dtypes.float16: 2e-2, dtypes.float32: 1e-4, dtypes.float64: 1e-12}.get(dt, 0)
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=tolerance, atol=tolerance * 10)
    if not (exact or dtypes.is_int(dt)) or expected.size * max(x.size for x in inputs) > PYTHON_WORK:
        return  # too slow to interpret
    with Context(NOOPT=1):
        plain = run(ast, inputs, expected.size, dt, "PYTHON")
    np.testing.assert_array_equal(got, plain)


DTYPES = [dtypes.float32, dtypes.float16, dtypes.int32]


# *** explicit opts: each transformation on its own and combined ***

UPCASTS: list[tuple[str, Callable[[DType], Case], tuple[Opt, ...]]] = [
    ("matmul vector", lambda dt: matmul(3, 7, 16, dt), (Opt(OptOps.UPCAST, 1, 8),)),
    ("matmul vector whole", lambda dt: matmul(3, 7, 16, dt), (Opt(OptOps.UPCAST, 1, 16),)),
    ("matmul both", lambda dt: matmul(6, 17, 8, dt), (Opt(OptOps.UPCAST, 0, 3), Opt(OptOps.UPCAST, 1, 4))),
    ("matmul size 1", lambda dt: matmul(1, 1, 2, dt), (Opt(OptOps.UPCAST, 1, 2),)),
    ("transposed", lambda dt: matmul_transposed(4, 3, 6, dt), (Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 3))),
    ("conv gated", lambda dt: conv1d(2, 3, 4, 7, dt), (Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UPCAST, 2, 7))),
    ("max", lambda dt: max_columns(7, 6, dt), (Opt(OptOps.UPCAST, 0, 3),)),
    ("nested", lambda dt: nested(3, 5, 4, dt), (Opt(OptOps.UPCAST, 0, 4),)),
    ("broadcast", lambda dt: broadcast_sum(4, 3, 6, dt), (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 2))),
    (
        "swap",
        lambda dt: matmul(6, 5, 8, dt),
        (Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.SWAP, 0, 1)),
    ),
    ("swap equal ends", lambda dt: matmul(4, 3, 4, dt), (Opt(OptOps.SWAP, 0, 1),)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize(("name", "make", "opts"), UPCASTS, ids=[u[0] for u in UPCASTS])
def test_upcast(name: str, make: Callable[[DType], Case], opts: tuple[Opt, ...], dt: DType, device: str) -> None:
    check(make(dt), dt, device, opts, exact=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize(("size", "parts"), [(3, 3), (17 * 2, 2), (1000, 8)])
def test_group(size: int, parts: int, dt: DType, device: str) -> None:
    check(full_sum(size, dt), dt, device, (Opt(OptOps.GROUP, 0, parts),))


@pytest.mark.parametrize("device", DEVICES)
def test_group_of_one_reduce_axis_among_several(device: str) -> None:
    r0, r1 = red(6, 0), red(4, 1)  # sum over both axes of (6, 4), split along axis 0
    a = data((6, 4), dtypes.float32)
    value = glob(1, 24, dtypes.float32).index(r0 * 4 + r1).load().reduce(r0, r1, arg=Ops.ADD)
    ast = UOp.sink(glob(0, 1, dtypes.float32).index(UOp.const(dtypes.index, 0)).store(value))
    check((ast, [a], a.astype(np.float64).sum().reshape(1)), dtypes.float32, device, (Opt(OptOps.GROUP, 0, 3),))


@pytest.mark.parametrize("device", DEVICES)
def test_group_inside_output_loops_and_around_a_nested_reduce(device: str) -> None:
    # out[i] = sum_r a[i, r] * sum_s b[r, s]: the r sum split in 3 per output row, the s sum inside each partial
    i, r, s = loop(5, 0), red(6, 1), red(4, 2)
    inner = glob(2, 24, dtypes.float32).index(r * 4 + s).load().reduce(s, arg=Ops.ADD)
    value = (glob(1, 30, dtypes.float32).index(i * 6 + r).load() * inner).reduce(r, arg=Ops.ADD)
    ast = UOp.sink(glob(0, 5, dtypes.float32).index(i).store(value))
    a, b = data((5, 6), dtypes.float32), data((6, 4), dtypes.float32, 1)
    expected = a.astype(np.float64) @ b.astype(np.float64).sum(1)
    check((ast, [a, b], expected), dtypes.float32, device, (Opt(OptOps.GROUP, 1, 3),))


@pytest.mark.parametrize(
    ("opt", "match"),
    [(Opt(OptOps.UPCAST, 1, 3), "UPCAST by 3 of axis 1: got size 16, expected a multiple"),
     (Opt(OptOps.UPCAST, 2, 7), "UPCAST needs a LOOP axis: got axis 2 of REDUCE"),
     (Opt(OptOps.GROUP, 0, 2), "GROUP needs a REDUCE axis: got axis 0 of LOOP"),
     (Opt(OptOps.UPCAST, 9, 2), "no single loop with axis id 9: got 0, expected 1"),
     (Opt(OptOps.UPCAST, 1, 1), "UPCAST by 1 of axis 1"),
     (Opt(OptOps.SWAP, 0, 2), "SWAP needs two LOOP axes or two REDUCE axes: got LOOP and REDUCE")],
)  # fmt: skip
def test_bad_opts_are_errors(opt: Opt, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        full_rewrite(with_opts(matmul(3, 7, 16, dtypes.float32)[0], (opt,)), ClangRenderer())


def test_symbolic_size_cannot_be_upcast() -> None:
    n = UOp.variable("n", 1, 64)
    r0, r1 = loop(8, 0), UOp.range(n, 1, AxisType.LOOP)
    value = glob(1, 64, dtypes.float32).index(r1).load().reduce(red(4, 2), arg=Ops.ADD)
    ast = UOp.sink(glob(0, 512, dtypes.float32).index(r0 * 64 + r1).store(value))
    with pytest.raises(ValueError, match="UPCAST needs a constant axis size"):
        full_rewrite(with_opts(ast, (Opt(OptOps.UPCAST, 1, 2),)), ClangRenderer())


# *** the heuristic ***

HEURISTIC_SIZES = [1, 3, 7, 17, 1000]


@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize("size", HEURISTIC_SIZES)
def test_heuristic_cpu_odd_sizes(size: int, dt: DType) -> None:
    cases = [matmul(size, 7, 16, dt), matmul(4, 5, size, dt), matmul_transposed(4, size, 8, dt),
             conv1d(2, 3, 8, size, dt), max_columns(5, size, dt), broadcast_sum(size, 3, 5, dt)]  # fmt: skip
    if dt != dtypes.float16:  # a half accumulator over 70000 elements is far from numpy's float64 sum
        cases.append(full_sum(size * 70, dt))
    for case in cases:
        check(case, dt, "CPU", None)


@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize("size", [1, 3, 7, 17])
def test_heuristic_python_odd_sizes(size: int, dt: DType) -> None:
    for case in (
        matmul(size, 3, 16, dt),
        conv1d(1, 2, 8, size, dt),
        nested(2, 3, size, dt),
        broadcast_sum(size, 2, 3, dt),
    ):
        check(case, dt, "PYTHON", None)


def tile_opts_of(ast: UOp) -> list[Opt]:
    """The heuristic's opts less its UNROLL (test_heuristic_unrolls_a_packed_tiles_long_reduce checks that)."""
    return [o for o in hand_coded_opts(ast) if o.op is not OptOps.UNROLL]


def test_heuristic_matmul_picks_a_vector_and_a_reuse_axis() -> None:
    # a 4x16 tile: 4 rows of a, 16 contiguous columns of b (two AVX2 registers), 64 float accumulators; a long
    # reduce: the column tiles' loop goes outside the row tiles', and each k x 16 panel of b is packed once; a's rows
    # (4 MiB) would stream from L3 per column tile: groups of 4 column tiles share one panel (SPLIT, column_groups),
    # and grouped tiles take wide_tile_opts' 5 rows (the last tile clamped)
    packed = [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 1, 2)]
    grouped = [Opt(OptOps.UPCAST_CLAMP, 0, 5), *packed[1:3], Opt(OptOps.SPLIT, 0, 4), packed[3]]
    assert tile_opts_of(matmul(1024, 1024, 1024, dtypes.float32)[0]) == grouped
    assert tile_opts_of(matmul(64, 8, 12, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 4)]  # fmt: skip
    # float64: 4 lanes a vector, the same 8 vector accumulators
    assert tile_opts_of(matmul(64, 8, 64, dtypes.float64)[0]) == [
        Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 8)]  # fmt: skip
    # ints stay scalar (no vector code): 64 accumulators of the old tile
    assert tile_opts_of(matmul(64, 8, 64, dtypes.int32)[0]) == [
        Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 16)]  # fmt: skip
    # 3 and 6 rows divide 300: 12 vector accumulators, as 3 x 4 vectors (7 loads a step, not 6 x 2's 8)
    assert tile_opts_of(matmul(300, 8, 32, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 0, 3), Opt(OptOps.UPCAST, 1, 32)]  # fmt: skip
    assert tile_opts_of(matmul(64, 8, 17, dtypes.float32)[0]) == []  # 17 columns: no vector split
    # an unrolled reduce's 4 x 2 tile takes 5 rows, clamped (short_tile_opts)
    assert tile_opts_of(matmul(64, 2048, 64, dtypes.float32)[0]) == [Opt(OptOps.UPCAST_CLAMP, 0, 5), *packed[1:]]
    # a @ a packs the columns' load of its one slot, grouped as a @ b's
    assert tile_opts_of(self_matmul(1024, dtypes.float32)[0]) == [*grouped[:4], Opt(OptOps.PACK, 1, 1)]
    # too few row tiles to pay for the copy: a long reduce only swaps
    assert tile_opts_of(matmul(8, 2048, 64, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.SWAP, 0, 1)]  # fmt: skip
    # a panel past PACK_MAX_BYTES (16384 x 16 floats): not packed
    assert tile_opts_of(matmul(64, 16384, 64, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.SWAP, 0, 1)]  # fmt: skip


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.int32], ids=str)
def test_heuristic_long_reduce_with_swap_runs_right(dt: DType) -> None:
    check(matmul(16, 2048, 24, dt), dt, "CPU", None)


def test_swap_interchanges_the_loops() -> None:
    ast = with_opts(matmul(6, 5, 8, dtypes.float32)[0], (Opt(OptOps.SWAP, 0, 1),))
    loops = [u.src[0].arg for u in full_rewrite(ast, ClangRenderer()) if u.op is Ops.RANGE]
    assert loops == [8, 6, 5]  # columns, rows, then the reduce


def test_heuristic_conv_vectorises_width_and_reuses_inputs_across_output_channels() -> None:
    # the whole row of 56 (7 vectors) for 2 output channels: 14 vector accumulators (unpadded, 58 inputs: no gates)
    assert hand_coded_opts(conv1d_strided(8, 8, 64, 58, 1, 0, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UPCAST, 2, 56)]  # fmt: skip
    # with a long enough reduce the channel tiles go innermost and read the inputs from a packed panel
    assert hand_coded_opts(conv1d_strided(8, 128, 64, 58, 1, 0, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UPCAST, 2, 56), Opt(OptOps.PACK, 1, 1)]  # fmt: skip
    # padded, on AVX2 too: 4 columns x 2 vectors of channels over the weights packed once per image
    # (channel_tile_opts; 2 x 7 vectors spill in gcc 12 and fold each load into 2 fmas)
    assert hand_coded_opts(conv1d(8, 128, 64, 56, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 2, 4), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.PACK, 0, 2)]  # fmt: skip
    check(conv1d(2, 128, 8, 56, dtypes.float32), dtypes.float32, "CPU", None, exact=True)


def test_heuristic_tiles_an_unpadded_strided_conv_over_its_columns() -> None:
    # stride 2, no pad (a ResNet skip's 1x1 conv): the columns read every other input, ungated, which gcc vectorises
    # as loads and a shuffle; the inputs serve 4 output channels each
    assert hand_coded_opts(conv1d_strided(2, 8, 16, 33, 2, 0, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 2, 16)]  # fmt: skip
    check(conv1d_strided(2, 8, 16, 33, 2, 0, dtypes.float32), dtypes.float32, "CPU", None, exact=True)


def test_heuristic_vectorises_a_strided_max_pool_through_gathers() -> None:
    # a 3-wide stride-2 max pool with a pad: no reuse, but its gated strided loads vectorise as masked gathers
    assert hand_coded_opts(pool1d_strided(4, 64, dtypes.float32)[0]) == [Opt(OptOps.UPCAST, 1, 32)]
    for dt in (dtypes.float32, dtypes.float16):
        check(pool1d_strided(4, 64, dt), dt, "CPU", None, exact=True)
    check(pool1d_strided(3, 31, dtypes.float32), dtypes.float32, "CPU", None, exact=True)


def test_heuristic_gathers_only_along_an_axis_contiguous_in_the_output() -> None:
    # the merged (channel, tap) axis's loads step by 3, but its stores stride by the row: a vector there scatters
    # every lane (the convnet's r_64_48_11_13_3, 0.26 -> 0.52 ms); the columns are upcast instead
    opts = hand_coded_opts(window_taps(4, 48, 13, dtypes.float32)[0])
    assert all(o.axis != 1 for o in opts)
    assert Opt(OptOps.UPCAST, 2, 13) in opts
    check(window_taps(2, 48, 13, dtypes.float32), dtypes.float32, "CPU", None, exact=True)


def test_heuristic_packs_a_padded_strided_convs_inputs() -> None:
    # stride 2 with a pad (a ResNet stem): a gated strided load doesn't vectorise, so the tile reads the inputs from a
    # panel packed per row (it holds the pad's zeros), serving all 16 output channels (it took 1 ms -> 0.27 ms)
    assert hand_coded_opts(conv1d_strided(2, 16, 16, 32, 2, 1, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 2, 16), Opt(OptOps.PACK, 1, 1)]  # fmt: skip
    check(conv1d_strided(2, 16, 16, 32, 2, 1, dtypes.float32), dtypes.float32, "CPU", None, exact=True)


def test_heuristic_tiles_a_wide_padded_conv_over_its_channels_on_a_wide_vector_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # with 64-byte vectors a row of 56 is no whole number of 16 lanes: 4 columns x 4 vectors of output channels (16
    # accumulators of AVX-512's 32 registers; 7 x 2 with 14: each gated input broadcast fed half the FMAs, bench/ops's
    # 8x64x56x56 forward 14.5 -> 12.8 ms single-thread), the weights packed once per image (outside the batch loop,
    # not per row: that panel made a 56x56 conv 2x slower), not 2 channels x 7 vectors of 8 columns over an input
    # panel every channel tile rereads (216 -> 122 us here, bench/conv.py's 8x64x56x56 forward 26 -> 10 ms)
    from fusegrad.codegen import vectorize

    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)
    assert hand_coded_opts(conv1d(8, 128, 64, 56, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 2, 4), Opt(OptOps.UPCAST, 1, 64), Opt(OptOps.PACK, 0, 2)]  # fmt: skip
    # 32 channels: 8 columns x 2 vectors
    assert hand_coded_opts(conv1d(8, 128, 32, 56, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 2, 8), Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.PACK, 0, 2)]  # fmt: skip
    check(conv1d(2, 16, 32, 56, dtypes.float32), dtypes.float32, "CPU", None)
    # unpadded (no gated loads along the columns): the contiguous tile at the narrower width, as before
    assert hand_coded_opts(conv1d_strided(8, 128, 64, 58, 1, 0, dtypes.float32)[0])[:2] == [
        Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UPCAST, 2, 56)]  # fmt: skip
    # 4 columns: no width gives whole vectors, so the channels do
    assert hand_coded_opts(conv1d_strided(2, 32, 32, 8, 2, 1, dtypes.float32)[0])[1] == Opt(OptOps.UPCAST, 1, 32)


def test_heuristic_halves_whole_rows_to_pack_a_padded_convs_input() -> None:
    # 4 output channels x 2 vectors of columns would take every channel, leaving no loop to pack the (gated) input
    # outside: 2 channels a tile, the channel loop innermost, the input row packed once for both tiles
    tile = [Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UPCAST, 2, 16), Opt(OptOps.SWAP, 1, 2), Opt(OptOps.PACK, 2, 1)]
    assert hand_coded_opts(conv1d_strided(2, 16, 4, 32, 1, 1, dtypes.float32)[0]) == tile
    check(conv1d_strided(2, 16, 4, 32, 1, 1, dtypes.float32), dtypes.float32, "CPU", None, exact=True)
    # plain loads (unpadded) keep the whole-axis tile: nothing to gain from a panel
    assert hand_coded_opts(conv1d_strided(2, 16, 4, 34, 1, 0, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 2, 16)]  # fmt: skip


def test_pack_computes_a_fused_input_prologue_once_per_panel_element() -> None:
    # relu(x + bias), then the pad's select: the panel holds the whole factor, so the tile's loop only multiplies
    # and adds (the convnet's 16x16 convs over the previous bn + relu: 44 -> 17 us)
    case = conv1d_prologue(2, 16, 4, 32, dtypes.float32)
    opts = hand_coded_opts(case[0])
    assert any(o.op is OptOps.PACK for o in opts)
    src = to_program(with_opts(case[0], tuple(opts)), ClangRenderer()).src
    compute = src[src.rindex("float8 acc") :]  # the tile's accumulators and everything after
    assert "?" not in compute  # no gate or relu select in the tile's loop
    assert "data3" not in compute  # nor the bias
    check(case, dtypes.float32, "CPU", None, exact=True)
    check(
        conv1d_prologue(3, 5, 8, 7, dtypes.float32),
        dtypes.float32,
        "CPU",
        (Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.PACK, 1, 1)),
        exact=True,
    )


def test_heuristic_packs_a_small_convs_weights_once_per_image() -> None:
    # 4 output columns, 32 channels: the tile takes every column and vectors of channels, whose weights (576 apart)
    # come from a panel packed outside the batch loop, which they don't depend on (was scalar: 158 -> 10.6 us)
    assert hand_coded_opts(conv1d_strided(2, 32, 32, 8, 2, 1, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 2, 4), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.PACK, 0, 2)]  # fmt: skip
    check(conv1d_strided(2, 32, 32, 8, 2, 1, dtypes.float32), dtypes.float32, "CPU", None, exact=True)
    # 2 contiguous columns (a 2x2 stage's conv): vectors of channels, not an upcast of 2 scalar columns
    assert hand_coded_opts(conv1d_strided(2, 64, 64, 2, 1, 1, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 2, 2), Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.PACK, 0, 2)]  # fmt: skip
    check(conv1d_strided(2, 64, 64, 2, 1, 1, dtypes.float32), dtypes.float32, "CPU", None, exact=True)
    # too few rows to pay for a panel: 2 columns of 1 image
    assert hand_coded_opts(conv1d_strided(1, 32, 32, 4, 2, 1, dtypes.float32)[0]) == []


def test_heuristic_tiles_a_conv_pooled_in_its_kernel_over_its_channels() -> None:
    # no reuse axis (the pool's columns are a reduce): one row of channel vectors, the weights packed outside the batch
    # loop and read 2 images x 4 columns times (the convnet's last conv + global pool: 400-700 -> 20-32 us)
    assert hand_coded_opts(conv1d_pooled(2, 64, 64, 4, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 1, 64), Opt(OptOps.PACK, 0, 2)]  # fmt: skip
    check(conv1d_pooled(2, 64, 64, 4, dtypes.float32), dtypes.float32, "CPU", None, exact=True)
    # one image of one column: the panel would serve a single row
    assert hand_coded_opts(conv1d_pooled(1, 64, 64, 1, dtypes.float32)[0]) == []
    check(conv1d_pooled(3, 16, 16, 3, dtypes.float32), dtypes.float32, "CPU", None, exact=True)


def test_heuristic_leaves_a_row_sum_of_unreused_loads_untiled() -> None:
    """No load but the broadcast p can be packed outside the batch loop: a row tile over t would read x and y lane by
    lane, 128 floats apart (128 -> 28 us single-thread at 16x64x128 untiled); the reduce loop stays innermost, its sum
    in LANES's vector accumulators where the row holds ROW_LANE_STEPS steps of them (row_lane_opts)."""
    case = row_sum_broadcast(16, 64, 128, dtypes.float32)
    assert hand_coded_opts(case[0]) == [Opt(OptOps.LANES, 2, LANE_VECTORS * 8)]  # 32-byte vectors (conftest.py)
    check(row_sum_broadcast(2, 16, 64, dtypes.float32), dtypes.float32, "CPU", None)
    check(row_sum_broadcast(2, 16, 64, dtypes.float32), dtypes.float32, "PYTHON", None, exact=True)


@settings(max_examples=15, deadline=None)
@given(
    st.integers(1, 3), st.integers(1, 40), st.sampled_from([1, 3, 8, 16, 32]), st.integers(3, 40), st.integers(1, 3),
    st.integers(0, 2),
)  # fmt: skip
def test_heuristic_opts_apply_to_any_strided_conv(
    batch: int, cin: int, cout: int, width: int, step: int, pad: int
) -> None:
    """Whatever the sizes, stride and pad, the heuristic's opts apply, and its tiles (upcasts, packed panels) keep
    each output's float sum in order: bit for bit the plain kernel on PYTHON."""
    case = conv1d_strided(batch, cin, cout, width, step, pad, dtypes.float32)
    opts = hand_coded_opts(graph_rewrite(case[0], sym))  # as codegen sees it: loops of 1 simplified away
    check(case, dtypes.float32, "CPU", None, exact=any(o.op is OptOps.UPCAST for o in opts))


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 3), st.integers(1, 24), st.sampled_from([1, 8, 16, 24, 64]), st.integers(1, 6))
def test_heuristic_opts_apply_to_any_pooled_conv(batch: int, cin: int, cout: int, width: int) -> None:
    """A conv summed over its columns in one kernel: whatever the sizes, the heuristic's opts apply; a row tile with
    its weights packed keeps the sums in order (bit for bit), others may let C reorder the conv's sum."""
    case = conv1d_pooled(batch, cin, cout, width, dtypes.float32)
    opts = hand_coded_opts(graph_rewrite(case[0], sym))  # as codegen sees it: loops of 1 simplified away
    check(case, dtypes.float32, "CPU", None, exact=any(o.op is OptOps.PACK for o in opts))


@pytest.mark.parametrize(
    ("sizes", "tile"),
    [((1024, 1024, 8), (16, 4)), ((56, 64, 8), (56, 2)), ((16, 6, 8), (16, 6)), ((12, 4, 8), (0, 0)),
     ((8, 1, 8), (8, 1)), ((64, 64, 4), (8, 4))],
)  # fmt: skip
def test_register_tile(sizes: tuple[int, int, int], tile: tuple[int, int]) -> None:
    assert register_tile(*sizes) == tile


def test_heuristic_without_contiguous_output_axis_keeps_the_reduce_innermost() -> None:
    assert hand_coded_opts(matmul_transposed(64, 16, 64, dtypes.float32)[0]) == []  # a @ b.T: a simd reduction over k
    assert hand_coded_opts(matmul_transposed(64, 512, 64, dtypes.int32)[0]) == []  # ints: no vector tile


def test_heuristic_tiles_a_transposed_matmul_through_a_packed_panel() -> None:
    # Linear's x @ w.T: no load is contiguous in an output axis, but b's panel, packed k-major, is in the columns
    # (on AVX2 5 rows clamped over this unrolled reduce of 512: short_tile_opts)
    tile = [Opt(OptOps.UPCAST_CLAMP, 0, 5), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 1, 2)]
    assert tile_opts_of(matmul_transposed(64, 512, 64, dtypes.float32)[0]) == tile
    check(matmul_transposed(16, 512, 64, dtypes.float32), dtypes.float32, "CPU", None)


def test_heuristic_doubles_a_packed_tiles_rows_on_a_wide_vector_host(monkeypatch: pytest.MonkeyPatch) -> None:
    # 16 accumulators of AVX-512's 32 registers: 8 rows x 2 vectors, not 4 x 2 (matmul 1024: 164 -> 190 GFLOP/s
    # single-thread); AVX2's 14 keep 4 x 2 (test_heuristic_matmul_picks_a_vector_and_a_reuse_axis)
    from fusegrad.codegen import vectorize

    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)
    tile = [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 1, 2)]
    # column tiles in groups (column_groups): pairs of 512 KiB panels over 4096 rows (matmul 1024 and 2048 take
    # opt.wide_tile_opts' 6 x 4 tile instead: test_wide_tile.py; here its 1 MiB panels would not pair)
    assert tile_opts_of(matmul(4096, 4096, 2048, dtypes.float32)[0]) == [*tile[:3], Opt(OptOps.SPLIT, 0, 2), tile[3]]
    assert tile_opts_of(matmul(1024, 384, 128, dtypes.float32)[0]) == tile
    check(matmul(64, 64, 64, dtypes.float32), dtypes.float32, "CPU", None)
    # unpacked tiles keep theirs
    plain = [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 32)]
    assert tile_opts_of(matmul(64, 8, 64, dtypes.float32)[0]) == plain


def test_heuristic_keeps_a_transposed_matmuls_panel_in_l1(monkeypatch: pytest.MonkeyPatch) -> None:
    # 16-lane vectors over a reduce of 512: one vector of columns (a 32 KiB panel, reread per row tile from L1) and
    # 8 rows, not 4 x 32 (a 64 KiB panel from L2: 1.65 -> 1.2 ms for the GPT step's x @ w.T)
    from fusegrad.codegen import vectorize

    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)
    tile = [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 1, 2)]
    assert tile_opts_of(matmul_transposed(64, 512, 128, dtypes.float32)[0]) == tile
    # room for 2 vectors in L1 (a reduce of 128): 8 rows x 2 vectors, not register_tile's 4 x 3 (qkv's x @ w.T:
    # 918 -> 720 us)
    two = [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 1, 2)]
    assert tile_opts_of(matmul_transposed(1024, 128, 384, dtypes.float32)[0]) == two
    check(matmul_transposed(16, 128, 64, dtypes.float32), dtypes.float32, "CPU", None)
    # a reduce of 800 whose one-vector tile finds no rows (10): the widest tile that packs, as before
    assert Opt(OptOps.UPCAST, 0, 32) in tile_opts_of(matmul_transposed(64, 800, 10, dtypes.float32)[0])


def test_heuristic_packs_a_weight_gradients_larger_row_operand(monkeypatch: pytest.MonkeyPatch) -> None:
    # x.T @ g over 1024 tokens, x the larger: a cache line of x's rows a tile, packed once per row tile outside the
    # column loop (was 4 rows x 32 columns, g packed per column tile, x read 4 floats a line: 2.1 -> 1.2 ms)
    from fusegrad.codegen import vectorize

    f32 = dtypes.float32
    tile = [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.PACK, 1, 1)]
    assert tile_opts_of(weight_gradient(512, 1024, 128, f32)[0]) == tile  # 8 lanes: at most 14 accumulators
    check(weight_gradient(64, 256, 32, f32), f32, "CPU", None)
    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)
    tile = [Opt(OptOps.UPCAST, 0, 16), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.PACK, 1, 1)]
    assert tile_opts_of(weight_gradient(512, 1024, 128, f32)[0]) == tile
    # a gradient of heads (3 x 4 heads of 32) read as 384 rows: ((r + 16 o) % 32) is no constant step, yet a's rows
    assert tile_opts_of(weight_gradient(384, 1024, 128, f32, block=32)[0]) == tile
    swapped = [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 16), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 1, 1)]
    assert tile_opts_of(weight_gradient(384, 1024, 128, f32, block=32, swapped=True)[0]) == swapped
    check(weight_gradient(384, 64, 32, f32, block=32, swapped=True), f32, "CPU", None)
    # g the larger: its panel per column tile, as before (x, 512 KiB, is read from L2), with 8 rows, not 4: 16
    # accumulators of AVX-512's 32 registers (1.08 -> 0.92 ms)
    taller = [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 1, 2)]
    assert tile_opts_of(weight_gradient(128, 1024, 512, f32)[0]) == taller
    check(weight_gradient(32, 256, 64, f32), f32, "CPU", None)


def conv2d_valid(batch: int, cin: int, cout: int, size: int, dt: DType) -> Case:
    """out (batch, cout, size - 2, size - 2) = the unpadded 3x3 conv of x (batch, cin, size, size) with w."""
    out = size - 2
    n, o, y, x = loop(batch, 0), loop(cout, 1), loop(out, 2), loop(out, 3)
    c, ky, kx = red(cin, 4), red(3, 5), red(3, 6)
    plane, out_plane = size * size, out * out
    inp = glob(1, batch * cin * plane, dt).index(n * (cin * plane) + c * plane + (y + ky) * size + x + kx)
    weight = glob(2, cout * cin * 9, dt).index(o * (cin * 9) + c * 9 + ky * 3 + kx)
    value = (inp.load() * weight.load()).reduce(c, ky, kx, arg=Ops.ADD)
    dest = glob(0, batch * cout * out_plane, dt).index(n * (cout * out_plane) + o * out_plane + y * out + x)
    ast = UOp.sink(dest.store(value))
    xs, ws = data((batch, cin, size, size), dt), data((cout, cin, 3, 3), dt, 1)
    windows = np.stack([xs[:, :, i : i + out, j : j + out] for i in range(3) for j in range(3)], -1).astype(np.float64)
    return ast, [xs, ws], np.einsum("ncyxk,ock->noyx", windows, ws.reshape(cout, cin, 9).astype(np.float64)).ravel()


def conv2d_padded(batch: int, cin: int, cout: int, size: int, dt: DType, channels_inner: bool = False) -> Case:
    """out (batch, cout, size, size) = the 3x3 conv of x (batch, cin, size, size) padded by 1 (gated loads) with w; its
    reduce loops (cin, ky, kx), or (ky, kx, cin) with `channels_inner` (as a conv's input gradient nests them)."""
    n, o, y, x = loop(batch, 0), loop(cout, 1), loop(size, 2), loop(size, 3)
    c, ky, kx = (red(cin, 6), red(3, 4), red(3, 5)) if channels_inner else (red(cin, 4), red(3, 5), red(3, 6))
    py, px, plane = y + ky - 1, x + kx - 1, size * size
    valid = (py >= 0) & (py < size) & (px >= 0) & (px < size)
    inp = glob(1, batch * cin * plane, dt).index(n * (cin * plane) + c * plane + py * size + px, valid)
    weight = glob(2, cout * cin * 9, dt).index(o * (cin * 9) + c * 9 + ky * 3 + kx)
    value = (inp.load() * weight.load()).reduce(c, ky, kx, arg=Ops.ADD)
    dest = glob(0, batch * cout * plane, dt).index(n * (cout * plane) + o * plane + y * size + x)
    xs, ws = data((batch, cin, size, size), dt), data((cout, cin, 3, 3), dt, 1)
    padded = np.pad(xs.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.stack([padded[:, :, i : i + size, j : j + size] for i in range(3) for j in range(3)], -1)
    expected = np.einsum("ncyxk,ock->noyx", windows, ws.reshape(cout, cin, 9).astype(np.float64)).ravel()
    return UOp.sink(dest.store(value)), [xs, ws], expected


def test_heuristic_packs_a_convs_weights_outside_the_outermost_loop_when_the_panel_fits_l1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the tile takes all 11 columns: the weights' panel once per image (2 channel tiles x 16 x 144 floats, 18 KiB),
    # not once per image row (the convnet step's conv2 forward 472 -> 386 us)
    from fusegrad.codegen import vectorize

    monkeypatch.setattr(vectorize, "host_vector_bytes", lambda: vectorize.WIDE_VECTOR_BYTES)
    f32 = dtypes.float32
    assert hand_coded_opts(conv2d_valid(4, 16, 32, 13, f32)[0]) == [
        Opt(OptOps.UPCAST, 3, 11), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.PACK, 0, 2)]  # fmt: skip
    check(conv2d_valid(2, 16, 32, 13, f32), f32, "CPU", None)
    # 64 input channels: 4 x 64 x 576 floats is past 32 KiB, so the panel stays per row
    assert hand_coded_opts(conv2d_valid(4, 64, 32, 13, f32)[0])[-1] == Opt(OptOps.PACK, 2, 2)


def max_pool(channels: int, rows: int, cols: int, dt: DType) -> Case:
    """out (channels, rows, cols) = the max of each 2x2 window of x (channels, 2 rows, 2 cols)."""
    c, y, x, wy, wx = loop(channels, 0), loop(rows, 1), loop(cols, 2), red(2, 3), red(2, 4)
    pos = c * (4 * rows * cols) + (y * 2 + wy) * (2 * cols) + x * 2 + wx
    value = glob(1, channels * rows * cols * 4, dt).index(pos).load().reduce(wy, wx, arg=Ops.MAX)
    ast = UOp.sink(glob(0, channels * rows * cols, dt).index(c * (rows * cols) + y * cols + x).store(value))
    xs = data((channels, 2 * rows, 2 * cols), dt)
    return ast, [xs], xs.reshape(channels, rows, 2, cols, 2).max((2, 4)).astype(np.float64).ravel()


def test_heuristic_takes_a_row_of_lanes_for_a_short_reduce_without_a_tile() -> None:
    # a 2x2 max pool on 13 columns: no whole vector of columns, a window too short for a simd reduction; 13 columns
    # a step (gathers at stride 2) and a vector store (0.91 -> 0.28 ms in the convnet step)
    assert hand_coded_opts(max_pool(16, 13, 13, dtypes.float32)[0]) == [Opt(OptOps.UPCAST, 2, 13)]
    assert hand_coded_opts(max_pool(16, 13, 26, dtypes.float32)[0]) == [Opt(OptOps.UPCAST, 2, 13)]  # up to 16
    assert hand_coded_opts(max_pool(16, 5, 5, dtypes.float32)[0]) == []  # 5 lanes: gcc leaves them scalar, 4x slower
    for dt in DTYPES:
        check(max_pool(3, 2, 13, dt), dt, "CPU", None, exact=True)
        check(max_pool(3, 2, 13, dt), dt, "PYTHON", None, exact=True)


def test_heuristic_moves_loops_a_reduce_does_not_depend_on_inside() -> None:
    # out (4, 6) = a (3, 6).sum(0) for every row: the sum runs once per column, not once per (row, column)
    # (and the column axis, contiguous in a, is the vector axis)
    assert hand_coded_opts(broadcast_sum(4, 3, 6, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 2)]  # fmt: skip
    assert hand_coded_opts(broadcast_sum(1000, 3, 7, dtypes.float32)[0]) == [Opt(OptOps.UPCAST, 0, 250)]
    r0, r1, r2 = loop(64, 0), loop(16, 1), red(8, 2)  # out[i, j] = sum_k a[i, k]: j is inside already
    value = glob(1, 512, dtypes.float32).index(r0 * 8 + r2).load().reduce(r2, arg=Ops.ADD)
    assert hand_coded_opts(UOp.sink(glob(0, 1024, dtypes.float32).index(r0 * 16 + r1).store(value))) == []


def test_heuristic_groups_big_full_reductions_only() -> None:
    assert hand_coded_opts(full_sum(1 << 20, dtypes.float32)[0])[:1] == [Opt(OptOps.GROUP, 0, 16)]  # + LANES
    assert hand_coded_opts(full_sum(1000, dtypes.float32)[0]) == []  # too small to pay for threads
    assert hand_coded_opts(full_sum((1 << 16) + 1, dtypes.float32)[0]) == []  # odd: no even split


def test_heuristic_leaves_kernels_without_reduce_or_reuse_alone() -> None:
    r0, r1 = loop(64, 0), red(64, 1)  # a row sum: no load is contiguous in or independent of the output axis
    row_sum = glob(1, 4096, dtypes.float32).index(r0 * 64 + r1).load().reduce(r1, arg=Ops.ADD)
    assert hand_coded_opts(UOp.sink(glob(0, 64, dtypes.float32).index(r0).store(row_sum))) == []
    r0 = loop(64, 0)
    copy = glob(0, 64, dtypes.float32).index(r0).store(glob(1, 64, dtypes.float32).index(r0).load())
    assert hand_coded_opts(UOp.sink(copy)) == []


def test_noopt_and_applied_opts() -> None:
    ast = matmul(64, 8, 64, dtypes.float32)[0]
    assert full_rewrite(ast, ClangRenderer())[-1].arg.applied_opts == (
        Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 16))  # fmt: skip
    with Context(NOOPT=1):
        assert full_rewrite(ast, ClangRenderer())[-1].arg.applied_opts == ()
        given = (Opt(OptOps.UPCAST, 1, 2),)
        assert full_rewrite(with_opts(ast, given), ClangRenderer())[-1].arg.applied_opts == given


def test_stride() -> None:
    r0, r1, r2 = loop(4, 0), loop(8, 1), red(3, 2)
    assert [stride(r0 * 24 + r1 * 3 + r2, r) for r in (r0, r1, r2)] == [24, 3, 1]
    assert stride(r0 * 8 + r2, r1) == 0
    assert stride((r0 * 8 + r1) // 3, r1) is None


# *** the C it renders ***


def test_matmul_renders_the_i_k_j_order() -> None:
    src = to_program(matmul(64, 16, 64, dtypes.float32)[0], ClangRenderer()).src  # too short a reduce to pack
    body = src[src.index("void") :]
    assert "float8 acc0[8];" in body  # 4 rows x 2 vectors of 8 columns
    k_loop = body.index("for (long long ridx2 = 0; ridx2 < 16")
    # inside k: the reuse loop and the loop over vectors unrolled (their accumulators stay in registers)
    assert body.index("#pragma GCC unroll 4", k_loop) < body.index("#pragma GCC unroll 2", k_loop)
    assert body.count("#pragma GCC unroll") == 2  # not around the set-up or the read-out
    assert "(*(const float8_u*)&data2[" in body  # b's row: one vector load
    assert "reduction" not in body  # the k loop carries the accumulators in order
    assert "omp simd" not in body


def test_group_renders_parallel_partials() -> None:
    # GROUP alone (the heuristic adds LANES: test_lanes.py)
    src = to_program(with_opts(full_sum(1 << 20, dtypes.float32)[0], (Opt(OptOps.GROUP, 0, 16),)), ClangRenderer()).src
    body = src[src.index("void") :]
    assert "float acc0[16] __attribute__((aligned(32)));" in body
    assert body.index("#pragma omp parallel for") < body.index("#pragma omp simd reduction(+:acc1)")
    assert "acc0[ridx1] = acc1;" in body


def test_small_reduce_loops_around_upcasts_are_unrolled() -> None:
    src = to_program(conv1d(8, 16, 16, 56, dtypes.float32)[0], ClangRenderer()).src
    body = src[src.index("void") :]
    window = body.index("for (long long ridx4 = 0; ridx4 < 3")  # the 3 taps: unrolled
    assert body[:window].rstrip().endswith("#pragma GCC unroll 3")
    channels = body.index("for (long long ridx3 = 0; ridx3 < 16")  # 16 input channels: a loop
    assert not body[:channels].rstrip().endswith("#pragma GCC unroll 16")


def _divisors(n: int) -> list[int]:
    return [d for d in range(2, n + 1) if n % d == 0]


@st.composite
def conv_and_opts(draw: st.DrawFn) -> tuple[tuple[int, int, int, int], tuple[Opt, ...]]:
    """A small 1-d conv (gated loads, two reduce axes), random valid upcasts in any order, maybe then a swap of two
    output loops still there (a swap renames axes, so it comes last), maybe a swap of its two reduce loops anywhere."""
    batch, cout, width = draw(st.integers(1, 4)), draw(st.integers(1, 6)), draw(st.integers(1, 9))
    upcasts: list[Opt] = []
    left = {}  # axis -> iterations its loop keeps
    for axis, size in ((0, batch), (1, cout), (2, width)):
        amount = draw(st.sampled_from([1, *_divisors(size)]))
        if amount > 1:
            upcasts.append(Opt(OptOps.UPCAST, axis, amount))
        left[axis] = size // amount
    opts = list(draw(st.permutations(upcasts)))
    loops = [axis for axis, n in left.items() if n > 1]
    if len(loops) >= 2 and draw(st.booleans()):
        opts.append(Opt(OptOps.SWAP, *draw(st.permutations(loops))[:2]))
    cin = draw(st.integers(1, 3))
    if cin > 1 and draw(st.booleans()):  # the reduce's loops (channels, window) in the other order
        opts.insert(draw(st.integers(0, len(opts))), Opt(OptOps.SWAP, 3, 4))
    return (batch, cin, cout, width), tuple(opts)


@settings(max_examples=10, deadline=None)
@given(conv_and_opts())
def test_random_opts_keep_results_bit_for_bit(case: tuple[tuple[int, int, int, int], tuple[Opt, ...]]) -> None:
    """Any valid opts in any order: CPU and PYTHON agree with numpy and with the plain kernel (int32: exact)."""
    sizes, opts = case
    for device in DEVICES:
        check(conv1d(*sizes, dtypes.int32), dtypes.int32, device, opts)


# *** regressions: the heuristic's opts always apply ***


def test_heuristic_swaps_no_loop_an_upcast_took_whole() -> None:
    # a long reduce over 4 rows: the reuse upcast takes all 4, so no row loop is left to swap (it was SWAP 0 1, and
    # apply_opts failed: "no single loop with axis id 0"; a ResNet's 3x3 convs with 256+ input channels hit it too)
    assert tile_opts_of(matmul(4, 2048, 64, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 16)]  # fmt: skip
    # 8 columns taken whole: b's panel is all of b, packed once outside the row loop
    assert tile_opts_of(matmul(64, 2048, 8, dtypes.float32)[0]) == [
        Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.PACK, 0, 2)]  # fmt: skip
    check(matmul(4, 2048, 64, dtypes.int32), dtypes.int32, "CPU", None)
    check(matmul(64, 2048, 8, dtypes.float32), dtypes.float32, "CPU", None, exact=True)


def test_arange_gather_with_a_long_one_hot_reduce() -> None:
    # out[i, j] = sum_k (idx[i] == k) * w[k, j]: the one-hot matmul that arange-based indexing builds
    idx, w = np.array([3, 0, 4095, 17, 1, 2, 5, 4000]), np.random.default_rng(0).standard_normal((4096, 8))
    one_hot = Tensor(idx).unsqueeze(-1) == Tensor.arange(4096)
    got = one_hot.unsqueeze(-1).where(Tensor(w.astype(np.float32)), 0).sum(1).numpy()
    np.testing.assert_allclose(got, w[idx], rtol=1e-6)
    np.testing.assert_array_equal(Tensor.arange(4096)[Tensor(idx)].numpy(), idx)


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 24), st.sampled_from([1, 5, 2048, 2049]), st.integers(1, 24))
def test_heuristic_opts_apply_to_any_matmul(m: int, k: int, n: int) -> None:
    """Whatever the sizes, the heuristic's opts apply and keep an int matmul exact."""
    check(matmul(m, k, n, dtypes.int32), dtypes.int32, "CPU", None)


# *** property: any sequence of legal opts (BEAM's search space) computes what the plain kernel does ***

KERNELS: dict[str, Callable[[DType], Case]] = {
    "matmul": lambda dt: matmul(6, 5, 8, dt),
    "transposed": lambda dt: matmul_transposed(4, 6, 6, dt),
    "conv": lambda dt: conv1d(2, 2, 4, 6, dt),
    "nested": lambda dt: nested(4, 3, 6, dt),
    "broadcast": lambda dt: broadcast_sum(4, 6, 4, dt),
    "full sum": lambda dt: full_sum(48, dt),
}


@st.composite
def kernel_and_search_path(draw: st.DrawFn) -> tuple[str, tuple[Opt, ...]]:
    """A kernel and a walk of 0-3 steps through BEAM's actions from no opts (or from the heuristic's)."""
    name = draw(st.sampled_from(sorted(KERNELS)))
    sink = graph_rewrite(KERNELS[name](dtypes.int32)[0], sym)
    opts: tuple[Opt, ...] = tuple(hand_coded_opts(sink)) if draw(st.booleans()) else ()
    for _ in range(draw(st.integers(0, 3))):
        if not (options := extensions(sink, opts)):
            break
        opts = draw(st.sampled_from(options))
    return name, opts


@settings(max_examples=25, deadline=None)
@given(kernel_and_search_path())
def test_search_paths_keep_results_on_cpu_and_python(case: tuple[str, tuple[Opt, ...]]) -> None:
    """int32 (exact): CPU and PYTHON with the opts, bit for bit against the plain kernel on PYTHON and numpy."""
    name, opts = case
    for device in DEVICES:
        check(KERNELS[name](dtypes.int32), dtypes.int32, device, opts)


@settings(max_examples=10, deadline=None)
@given(kernel_and_search_path())
def test_search_paths_keep_float_results_close(case: tuple[str, tuple[Opt, ...]]) -> None:
    name, opts = case
    check(KERNELS[name](dtypes.float32), dtypes.float32, "CPU", opts)


def test_group_refuses_partials_and_swap_refuses_grouped_kernels() -> None:
    # the combination loop of a GROUP is a reduce over registers, not data; a swap after a GROUP could move an output
    # loop inside the partials' write (both were linearize errors: "nodes depend on a loop they are inside")
    regroup = (Opt(OptOps.GROUP, 0, 4), Opt(OptOps.GROUP, 2, 2))
    with pytest.raises(ValueError, match="GROUP of axis 2: got the combination of partials"):
        full_rewrite(with_opts(full_sum(48, dtypes.float32)[0], regroup), ClangRenderer())
    swap_after = (Opt(OptOps.GROUP, 2, 2), Opt(OptOps.SWAP, 0, 1))
    with pytest.raises(ValueError, match="SWAP of axes 0 and 1: got a kernel with GROUP applied"):
        full_rewrite(with_opts(matmul(4, 4, 4, dtypes.float32)[0], swap_after), ClangRenderer())


# *** PACK: a reduce's loads read from a panel copied outside an output loop ***

PACKS: list[tuple[str, Callable[[DType], Case], tuple[Opt, ...]]] = [
    ("matmul", lambda dt: matmul(6, 5, 16, dt),
     (Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 1, 2))),
    ("matmul plain", lambda dt: matmul(3, 4, 5, dt), (Opt(OptOps.PACK, 0, 2),)),  # all of b, once, outside i
    ("matmul a across columns", lambda dt: matmul(3, 4, 5, dt), (Opt(OptOps.PACK, 1, 1),)),  # a's row, per row
    ("a @ a", lambda dt: self_matmul(16, dt),  # the load of slot 1 that doesn't depend on the row loop
     (Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 1, 1))),
    ("conv gated", lambda dt: conv1d(2, 3, 4, 7, dt), (Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.PACK, 1, 1))),
    ("conv whole", lambda dt: conv1d(2, 3, 4, 8, dt),
     (Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UPCAST, 2, 8), Opt(OptOps.PACK, 1, 1))),
    ("conv weights", lambda dt: conv1d(2, 3, 4, 7, dt), (Opt(OptOps.PACK, 2, 2),)),
    ("transposed", lambda dt: matmul_transposed(6, 5, 16, dt),  # b's panel turns its columns contiguous
     (Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 1, 2))),
    ("conv select", lambda dt: conv1d_select(2, 3, 4, 8, dt),
     (Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UPCAST, 2, 8), Opt(OptOps.PACK, 1, 1))),
    ("weight gradient rows", lambda dt: weight_gradient(8, 5, 16, dt),  # a's rows packed per row tile
     (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.PACK, 1, 1))),
    ("weight gradient heads", lambda dt: weight_gradient(12, 5, 16, dt, block=6, swapped=True),
     (Opt(OptOps.UPCAST, 1, 6), Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 1, 1))),
    ("conv channel tile", lambda dt: conv1d(2, 3, 16, 7, dt),  # the weights packed once outside the batch loop
     (Opt(OptOps.UPCAST, 2, 7), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.PACK, 0, 2))),
]  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [*DTYPES, dtypes.float64], ids=str)
@pytest.mark.parametrize(("name", "make", "opts"), PACKS, ids=[p[0] for p in PACKS])
def test_pack(name: str, make: Callable[[DType], Case], opts: tuple[Opt, ...], dt: DType, device: str) -> None:
    """The same loaded values in the same order: bit for bit the plain kernel (a gated load copies its zeros). Without
    an upcast the C of a reduce loop may reorder a float sum (`simd reduction`): close then."""
    check(make(dt), dt, device, opts, exact=any(o.op is OptOps.UPCAST for o in opts))


def test_pack_renders_a_panel_filled_outside_the_loop_it_serves() -> None:
    opts = (Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.PACK, 1, 2))
    src = to_program(with_opts(matmul(6, 5, 16, dtypes.float32)[0], opts), ClangRenderer()).src
    body = src[src.index("void") :]
    panel = body.index("float acc0[40] __attribute__((aligned(32)));")  # 5 x 8 of b
    rows = body.index("for (long long ridx1 = 0; ridx1 < 3")
    assert panel < body.index("acc0[", panel + 20) < rows  # declared and filled before the row loop
    assert "data2[" not in body[rows:]  # the row tiles read b from the panel only
    assert "(*(const float8_u*)&acc0[" in body[rows:]  # as vectors


def test_pack_takes_a_pad_select_into_the_panel() -> None:
    # the panel holds the zeros of the padding: its reads are plain vector loads, no gate
    opts = (Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UPCAST, 2, 8), Opt(OptOps.PACK, 1, 1))
    src = to_program(with_opts(conv1d_select(2, 3, 4, 8, dtypes.float32)[0], opts), ClangRenderer()).src
    compute = src[src.index("for (long long ridx1 = 0") :]
    assert "(*(const float8_u*)&acc0[" in compute
    assert "?" not in compute


@pytest.mark.parametrize(
    ("opts", "match"),
    [((Opt(OptOps.PACK, 0, 1),), "PACK of slot 1 across axis 0: got 0 loads of it inside reduces that don't depend"),
     ((Opt(OptOps.PACK, 0, 0),), "PACK of slot 0 across axis 0: got 0 loads"),
     ((Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.PACK, 3, 2)), "PACK needs a LOOP or REDUCE axis: got axis 3 of UPCAST"),
     ((Opt(OptOps.PACK, 0, 2), Opt(OptOps.UPCAST, 1, 2)), "UPCAST of axis 1: got a kernel with GROUP or PACK"),
     ((Opt(OptOps.PACK, 0, 2), Opt(OptOps.SWAP, 0, 1)), "SWAP of axes 0 and 1: got a kernel with GROUP applied")],
)  # fmt: skip
def test_bad_packs_are_errors(opts: tuple[Opt, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        full_rewrite(with_opts(matmul(3, 7, 16, dtypes.float32)[0], opts), ClangRenderer())


def test_pack_refuses_a_panel_past_the_limit() -> None:
    # the columns upcast whole: a panel over no output loop, PACK_MAX_BYTES (one over a loop: test_column_groups)
    opts = (Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.PACK, 0, 2))
    with pytest.raises(ValueError, match="PACK of slot 2: got a 1048576-byte panel, expected at most 262144"):
        full_rewrite(with_opts(matmul(2, 16384, 16, dtypes.float32)[0], opts), ClangRenderer())


@st.composite
def matmul_tile_and_pack(draw: st.DrawFn) -> tuple[tuple[int, int, int], tuple[Opt, ...]]:
    """A small matmul, a random row upcast and column upcast (vector widths included; always one, so no float sum is
    reordered by the C of a plain reduce loop), maybe a swap, then maybe a PACK of either operand across either output
    loop that is still there."""
    m, k, n = draw(st.integers(1, 8)), draw(st.integers(1, 9)), draw(st.sampled_from([4, 8, 12, 16, 24, 32]))
    opts: list[Opt] = []
    left = {}
    for axis, size in ((0, m), (1, n)):
        amount = draw(st.sampled_from([1, *_divisors(size)] if axis == 0 else _divisors(size)))
        if amount > 1:
            opts.append(Opt(OptOps.UPCAST, axis, amount))
        left[axis] = size // amount
    if all(left[a] > 1 for a in (0, 1)) and draw(st.booleans()):
        opts.append(Opt(OptOps.SWAP, 0, 1))
    loops = [a for a, size in left.items() if size > 1]
    if loops and k > 1 and draw(st.booleans()):  # k = 1 leaves no reduce to pack for
        opts.append(Opt(OptOps.PACK, draw(st.sampled_from(loops)), draw(st.sampled_from([1, 2]))))
    return (m, k, n), tuple(opts)


@settings(max_examples=25, deadline=None)
@given(matmul_tile_and_pack())
def test_random_tiles_and_packs_keep_results_bit_for_bit(case: tuple[tuple[int, int, int], tuple[Opt, ...]]) -> None:
    """float32 (vectorised on CPU) and int32: CPU and PYTHON with the opts give the plain kernel's bits on PYTHON."""
    sizes, opts = case
    ast = matmul(*sizes, dtypes.float32)[0]
    swapped = any(o.op is OptOps.SWAP for o in opts)  # the row and column loops traded axis ids
    depends = (opts[-1].axis == opts[-1].arg - 1) != swapped  # a's rows / b's columns
    if opts[-1].op is OptOps.PACK and depends:
        with pytest.raises(ValueError, match="got 0 loads"):
            full_rewrite(with_opts(ast, opts), ClangRenderer())
        return
    for dt in (dtypes.float32, dtypes.int32):
        case_ = matmul(*sizes, dt)
        with Context(NOOPT=1):
            plain = run(case_[0], case_[1], case_[2].size, dt, "PYTHON")
        for device in DEVICES:
            np.testing.assert_array_equal(run(with_opts(case_[0], opts), case_[1], case_[2].size, dt, device), plain)


def gated_projections(m: int, k: int, n: int, dt: DType) -> Case:
    """out (m, n) = relu(x @ g.T) * (x @ u.T) with x (m, k), g and u (n, k): a fused SwiGLU's two reduces (relu for
    silu, whose exp2 may differ by an ulp between libm and Python)."""
    i, j, r, s = loop(m, 0), loop(n, 1), red(k, 2), red(k, 3)
    x_buf = glob(1, m * k, dt)
    gate = (x_buf.index(i * k + r).load() * glob(2, n * k, dt).index(j * k + r).load()).reduce(r, arg=Ops.ADD)
    up = (x_buf.index(i * k + s).load() * glob(3, n * k, dt).index(j * k + s).load()).reduce(s, arg=Ops.ADD)
    ast = UOp.sink(glob(0, m * n, dt).index(i * n + j).store((gate < 0).where(0, gate) * up))
    x, g, u = data((m, k), dt), data((n, k), dt, 1), data((n, k), dt, 2)
    x64 = x.astype(np.float64)
    expected = np.maximum(x64 @ g.astype(np.float64).T, 0) * (x64 @ u.astype(np.float64).T)
    return ast, [x, g, u], expected.ravel()


def test_heuristic_packs_both_weights_of_fused_projections() -> None:
    """Both reduces read their weights from packed panels under one register tile, vectorised with a lane-by-lane
    relu; bit for bit the plain kernel on PYTHON."""
    case = gated_projections(16, 40, 16, dtypes.float32)
    opts = hand_coded_opts(graph_rewrite(case[0], sym))
    assert [o.arg for o in opts if o.op is OptOps.PACK] == [2, 3], opts  # slots 2 and 3: g and u
    assert "float8 acc" in to_program(case[0], ClangRenderer()).src
    for device in DEVICES:
        check(case, dtypes.float32, device, None, exact=True)


def test_heuristic_narrows_the_tile_of_a_long_transposed_reduce_to_fit_its_panel() -> None:
    """x @ w.T over 8192: a full tile's packed panel (8192 x 16 floats) would pass PACK_MAX_BYTES, and without a
    panel there is no tile at all; one vector of columns keeps it at 8192 x 8 floats (256 KiB)."""
    case = matmul_transposed(64, 8192, 16, dtypes.float32)
    opts = hand_coded_opts(graph_rewrite(case[0], sym))
    assert Opt(OptOps.UPCAST, 1, 8) in opts, opts
    assert any(o.op is OptOps.PACK for o in opts), opts
    check(case, dtypes.float32, "CPU", None)
