"""schedule/merge.py: adjacent loops that every index walks as one become one loop, a loop read through divisions and
moduli splits where that removes them, and nothing else changes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad import Tensor
from fusegrad.codegen import simplify_indexing
from fusegrad.codegen.opt import Opt, OptOps, hand_coded_opts
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import Context
from fusegrad.schedule.merge import merge_loops, split_loops
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp
from test.codegen.test_opt import data, glob, loop, red, run


def loop_sizes(ast: UOp) -> dict[AxisType, list[int]]:
    """The kernel's constant loop sizes by kind, in axis order."""
    ranges = sorted((u for u in ast.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg[0])
    ret: dict[AxisType, list[int]] = {}
    for r in ranges:
        ret.setdefault(r.arg[1], []).append(int(r.src[0].arg))
    return ret


def kernel_loops(t: Tensor) -> list[dict[AxisType, list[int]]]:
    return [loop_sizes(item.ast) for item in t.schedule() if item.ast.op is Ops.SINK]


def test_a_batchnorms_channel_sum_reduces_each_image_as_one_run() -> None:
    # (64, 16, 26, 26) summed over (0, 2, 3): per channel, 64 runs of 676 contiguous floats
    x = Tensor.randn(64, 16, 26, 26).realize()
    assert kernel_loops(x.sum(axis=(0, 2, 3))) == [{AxisType.LOOP: [16], AxisType.REDUCE: [64, 676]}]
    a = x.numpy()
    np.testing.assert_allclose(x.sum(axis=(0, 2, 3)).numpy(), a.sum(axis=(0, 2, 3)), rtol=1e-4)


def test_an_elementwise_op_on_contiguous_tensors_is_one_loop() -> None:
    a, b = Tensor.randn(4, 6, 10).realize(), Tensor.randn(4, 6, 10).realize()
    assert kernel_loops(a * b + 1) == [{AxisType.LOOP: [240]}]
    # a broadcast row: the batch and row loops merge, the row's columns stay a loop of their own
    assert kernel_loops(a + Tensor.randn(10).realize()) == [{AxisType.LOOP: [24, 10]}]
    # a transposed operand steps the two last loops the other way round: only the first two merge
    assert kernel_loops(a + b.transpose(1, 2).contiguous().realize().transpose(1, 2)) == [{AxisType.LOOP: [4, 6, 10]}]


def test_a_matmul_and_a_conv_keep_their_loops() -> None:
    a, w = Tensor.randn(32, 16).realize(), Tensor.randn(16, 8).realize()
    assert kernel_loops(a @ w) == [{AxisType.LOOP: [32, 8], AxisType.REDUCE: [16]}]
    # batched rows over one weight are rows of one matmul
    assert kernel_loops(Tensor.randn(4, 32, 16).realize() @ w) == [{AxisType.LOOP: [128, 8], AxisType.REDUCE: [16]}]
    # a conv's windows read the image with another row length than its output's: nothing merges there
    img, k = Tensor.randn(2, 3, 10, 10).realize(), Tensor.randn(4, 3, 3, 3).realize()
    (conv,) = kernel_loops(img.conv2d(k))
    assert conv[AxisType.LOOP] == [2, 4, 8, 8]


def test_a_mask_on_the_outer_loop_becomes_a_bound_on_the_merged_one() -> None:
    r0, r1 = loop(6, 0), loop(5, 1)
    x = glob(1, 30, dtypes.int32).index(r0 * 5 + r1).load()
    ast = UOp.sink(glob(0, 30, dtypes.int32).index(r0 * 5 + r1).store((r0 < 3).where(x, x * 2)))
    merged = merge_loops(ast)
    assert loop_sizes(merged) == {AxisType.LOOP: [30]}
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in merged.toposort())
    a = data((30,), dtypes.int32)
    np.testing.assert_array_equal(run(merged, [a], 30, dtypes.int32, "CPU"), np.where(np.arange(30) < 15, a, a * 2))


def test_loops_read_with_other_strides_or_through_a_modulo_stay() -> None:
    # a 2x pooling's window: the output's column steps the input by 2, its row by 2 rows
    r0, r1 = loop(4, 0), loop(4, 1)
    x = glob(1, 64, dtypes.int32).index(r0 * 16 + r1 * 2).load()
    pooled = UOp.sink(glob(0, 16, dtypes.int32).index(r0 * 4 + r1).store(x))
    assert loop_sizes(merge_loops(pooled)) == {AxisType.LOOP: [4, 4]}
    # an index taking the outer loop modulo 3: the merged loop would need a division again
    r0, r1 = loop(6, 0), loop(3, 1)
    y = glob(1, 18, dtypes.int32).index((r0 % 3) * 6 + r0 // 3 * 3 + r1).load()
    shuffled = UOp.sink(glob(0, 18, dtypes.int32).index(r0 * 3 + r1).store(y))
    assert loop_sizes(merge_loops(shuffled)) == {AxisType.LOOP: [6, 3]}


def test_reduce_loops_merge_only_under_the_same_reduces() -> None:
    # a row's mean then its centred sum of squares: two reduces, each over its own (2, 8) loops
    r, k1, k2, k3, k4 = loop(3, 0), red(2, 1), red(8, 2), red(2, 3), red(8, 4)
    x = glob(1, 48, dtypes.float32)
    mean = x.index(r * 16 + k1 * 8 + k2).load().reduce(k1, k2, arg=Ops.ADD) * (1 / 16)
    d = x.index(r * 16 + k3 * 8 + k4).load() - mean
    ast = UOp.sink(glob(0, 3, dtypes.float32).index(r).store((d * d).reduce(k3, k4, arg=Ops.ADD)))
    merged = merge_loops(ast)
    assert loop_sizes(merged) == {AxisType.LOOP: [3], AxisType.REDUCE: [16, 16]}
    a = data((48,), dtypes.float32)
    got = run(merged, [a], 3, dtypes.float32, "PYTHON")
    rows = a.reshape(3, 16).astype(np.float64)
    np.testing.assert_allclose(got, ((rows - rows.mean(1, keepdims=True)) ** 2).sum(1), rtol=1e-5)
    # one reduce over (k1, k2) and a second over k2 alone: k1 and k2 stay apart
    other = x.index(r * 16 + k1 * 8 + k2).load().reduce(k1, k2, arg=Ops.ADD) + x.index(r * 16 + k2).load().reduce(
        k2, arg=Ops.ADD
    )
    assert loop_sizes(merge_loops(UOp.sink(glob(0, 3, dtypes.float32).index(r).store(other))))[AxisType.REDUCE] == [
        2,
        8,
    ]


def test_a_bias_gradient_read_through_a_permute_splits_its_output_loop() -> None:
    # a fused qkv projection's bias gradient: the (3, B, heads, T, head) gradient summed into 3 x 4 x 32 biases. As one
    # loop of 384 every load index took r // 128, (r // 32) % 4 and r % 32, and the heuristic found no vector axis
    x = Tensor.randn(3, 4, 5, 32).realize()  # (3, heads, T, head), one sequence
    total = x.permute(2, 0, 1, 3).reshape(5, 384).sum(0)
    (ast,) = [i.ast for i in total.schedule() if i.ast.op is Ops.SINK]
    # 384 -> (12, 32) -> (3, 4, 32); the 3 and 4 then merge again: adjacent in x
    assert loop_sizes(ast) == {AxisType.LOOP: [12, 32], AxisType.REDUCE: [5]}
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in ast.toposort())
    assert Opt(OptOps.UPCAST, 2, 32) in hand_coded_opts(simplify_indexing(ast))  # the head's 32: contiguous
    np.testing.assert_allclose(total.numpy(), x.numpy().transpose(2, 0, 1, 3).reshape(5, 384).sum(0), rtol=1e-5)


def test_loops_split_only_where_that_removes_a_division() -> None:
    # r // 4 and r % 4 of a loop of 12: (3, 4), ids in order; the store's r is 4 * (r // 4) + r % 4
    r0, r = loop(2, 0), loop(12, 1)
    x = glob(1, 24, dtypes.int32).index((r % 4) * 6 + (r // 4) * 2 + r0).load()
    ast = UOp.sink(glob(0, 24, dtypes.int32).index(r0 * 12 + r).store(x))
    split = split_loops(ast)
    assert sorted((u.arg[0], int(u.src[0].arg)) for u in split.toposort() if u.op is Ops.RANGE) == [
        (0, 2), (1, 3), (2, 4)]  # fmt: skip
    a = data((24,), dtypes.int32)
    with Context(NOOPT=1):
        np.testing.assert_array_equal(
            run(split, [a], 24, dtypes.int32, "PYTHON"), run(ast, [a], 24, dtypes.int32, "PYTHON")
        )
    # a loop read modulo 5 (not a divisor of its 12), a reduce loop's division, or a plain loop: nothing splits
    k = red(12, 2)
    for value in (glob(1, 24, dtypes.int32).index(r % 5).load(),
                  glob(1, 24, dtypes.int32).index((k // 4) * 2 + k % 4).load().reduce(k, arg=Ops.ADD),
                  glob(1, 24, dtypes.int32).index(r + r0).load()):  # fmt: skip
        plain = UOp.sink(glob(0, 24, dtypes.int32).index(r0 * 12 + r).store(value))
        assert split_loops(plain) is plain


# *** property: any kernel runs as its unmerged self ***


@st.composite
def kernels(draw: st.DrawFn) -> tuple[UOp, list[np.ndarray], int, DType]:
    """A kernel over 2-4 loops (the last few reduce loops): two inputs, each read through a random permutation of
    some of the loops (contiguous in that order, a broadcast over the rest), maybe an offset, a mask on a loop or a
    loop modulo 2; an int or float output over the output loops."""
    n = draw(st.integers(2, 4))
    sizes = [draw(st.integers(1, 5)) for _ in range(n)]
    reduces = draw(st.integers(0, n - 1))
    ranges = [loop(s, i) if i < n - reduces else red(s, i) for i, s in enumerate(sizes)]
    dt = draw(st.sampled_from([dtypes.int32, dtypes.float32]))
    inputs, values = [], []
    for slot in (1, 2):
        axes = draw(st.permutations(range(n)))[: draw(st.integers(0, n))]
        idx, stride = UOp.const(dtypes.index, draw(st.integers(0, 2))), 1
        for axis in reversed(axes):
            term = ranges[axis] % 2 if draw(st.integers(0, 7)) == 0 else ranges[axis]
            idx, stride = idx + term * stride, stride * sizes[axis]
        size = stride + 2
        inputs.append(data((size,), dt, seed=slot))
        values.append(glob(slot, size, dt).index(idx).load())
    value = values[0] * values[1] + values[0]
    if draw(st.booleans()):
        axis = draw(st.integers(0, n - 1))
        value = (ranges[axis] < draw(st.integers(1, 4))).where(value, value * 3)
    if reduces:
        value = value.reduce(*ranges[n - reduces :], arg=Ops.ADD)
    out_idx, stride, out_size = UOp.const(dtypes.index, 0), 1, 1
    for r, s in reversed(list(zip(ranges[: n - reduces], sizes[: n - reduces], strict=True))):
        out_idx, stride = out_idx + r * stride, stride * s
        out_size *= s
    return UOp.sink(glob(0, out_size, dt).index(out_idx).store(value)), inputs, out_size, dt


@settings(max_examples=120, deadline=None)
@given(kernels())
def test_any_kernel_merged_gives_the_unmerged_kernels_bits(case: tuple[UOp, list[np.ndarray], int, DType]) -> None:
    """Merging keeps every loop's order and every sum's order: the merged kernel gives the unmerged one's bits on
    PYTHON, and on CPU (ints exactly; floats to rounding, since C may sum a plain reduce loop in SIMD lanes) with no
    opts and with the heuristic's."""
    ast, inputs, out_size, dt = case
    assert_runs_as(merge_loops(ast), ast, inputs, out_size, dt)


def assert_runs_as(changed: UOp, ast: UOp, inputs: list[np.ndarray], out_size: int, dt: DType) -> None:
    """`changed` gives `ast`'s bits on PYTHON without opts, and on CPU without opts and with the heuristic's (ints
    exactly; floats to rounding, since C may sum a plain reduce loop in SIMD lanes)."""
    with Context(NOOPT=1):
        plain = run(ast, inputs, out_size, dt, "PYTHON")
        np.testing.assert_array_equal(run(changed, inputs, out_size, dt, "PYTHON"), plain)
        cpu = run(changed, inputs, out_size, dt, "CPU")
    optimised = run(changed, inputs, out_size, dt, "CPU")
    for got in (cpu, optimised):
        if dt == dtypes.int32:
            np.testing.assert_array_equal(got, plain)
        else:
            np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_a_merged_layernorm_backward_matches_torch(device: str) -> None:
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(0).standard_normal((4, 3, 5, 6)).astype(np.float32)
    x = Tensor(a, device=device, requires_grad=True)
    y = (x - x.mean(axis=(0, 2, 3), keepdim=True)) * 2
    (y * y).sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    ty = (tx - tx.mean(dim=(0, 2, 3), keepdim=True)) * 2
    (ty * ty).sum().backward()
    assert x.grad is not None
    assert tx.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)


@st.composite
def split_kernels(draw: st.DrawFn) -> tuple[UOp, list[np.ndarray], int, DType]:
    """A kernel with an output loop r of p * q read as (r // q, r % q) in some order of the input's axes, beside an
    outer loop and maybe a reduce loop; the other input reads r whole, or one of its parts; maybe a mask on r."""
    p, q, o_size, k_size = (draw(st.integers(lo, hi)) for lo, hi in ((1, 4), (2, 4), (1, 3), (1, 3)))
    reduce = draw(st.booleans())
    o, r = loop(o_size, 0), loop(p * q, 1)
    k = red(k_size, 2) if reduce else None
    parts = [(r // q, p), (r % q, q), (o, o_size)] + ([(k, k_size)] if k is not None else [])
    order = draw(st.permutations(range(len(parts))))
    idx, stride = UOp.const(dtypes.index, 0), 1
    for i in reversed(order):
        idx, stride = idx + parts[i][0] * stride, stride * parts[i][1]
    dt = draw(st.sampled_from([dtypes.int32, dtypes.float32]))
    first = glob(1, stride, dt).index(idx).load()
    other = draw(st.sampled_from([r, r // q, r % q]))
    second = glob(2, p * q, dt).index(other).load()
    value = first * second + first
    if draw(st.booleans()):
        value = (r < draw(st.integers(1, p * q))).where(value, value * 3)
    if k is not None:
        value = value.reduce(k, arg=Ops.ADD)
    out_size = o_size * p * q
    ast = UOp.sink(glob(0, out_size, dt).index(o * (p * q) + r).store(value))
    return ast, [data((stride,), dt, seed=1), data((p * q,), dt, seed=2)], out_size, dt


@settings(max_examples=120, deadline=None)
@given(split_kernels())
def test_any_kernel_split_gives_the_unsplit_kernels_bits(case: tuple[UOp, list[np.ndarray], int, DType]) -> None:
    """Splitting keeps every loop's order (r // q outside r % q) and every sum's: the split kernel gives the
    unsplit one's bits on PYTHON, and on CPU with no opts and with the heuristic's (floats to rounding)."""
    ast, inputs, out_size, dt = case
    assert_runs_as(split_loops(ast), ast, inputs, out_size, dt)
    assert_runs_as(merge_loops(split_loops(ast)), ast, inputs, out_size, dt)  # as the scheduler runs them
