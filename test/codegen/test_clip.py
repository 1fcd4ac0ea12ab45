"""Triangular loops (codegen/clip.py): reduce loops clipped where their terms are the identity or their value is
unread, checked against the same kernel unclipped (clip_reduce_loops off) on PYTHON and CPU: random masks of the form
r <= i + k, strict or not, either way round, negated, two of them, under sums and maxima, with and without tiles."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import fusegrad.codegen as codegen
from fusegrad import Device, Tensor
from fusegrad.codegen import kernel_names, to_program
from fusegrad.codegen.clip import clip_reduce_loops
from fusegrad.codegen.opt import Opt, OptOps, apply_opts
from fusegrad.dtype import AddrSpace, dtypes
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, graph_rewrite
from fusegrad.uop.symbolic import sym
from test.codegen.test_opt import glob, loop, red, run, with_opts
from test.codegen.test_rowbuffer import softmax_ast

F32 = dtypes.float32
UPCAST = OptOps.UPCAST


@pytest.fixture(autouse=True)
def _fresh_kernel_names() -> None:
    kernel_names.clear()


def unclipped(ast: UOp, inputs: list[np.ndarray], size: int, device: str) -> np.ndarray:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(codegen, "clip_reduce_loops", lambda sink: sink)
        return run(ast, inputs, size, F32, device)


def mask(kind: int, r: UOp, i: UOp, k: int) -> UOp:
    """Where a term is kept, in the spellings the scheduler and users make (r, i: ranges; k: offset)."""
    match kind:
        case 0:
            return r < i + k  # r < i + k (strict)
        case 1:
            return (i + k < r).ne(True)  # r <= i + k, negated
        case 2:
            return r.cast(dtypes.int32) < (i + k).cast(dtypes.int32)  # casts, as mixin/nn.py's arange compare
        case 3:
            return (r < i + k) & (i - k < r)  # a band: both sides
        case _:
            return i < r + k  # r > i - k: kept on the far side (a prefix of identities, nothing to clip)


@st.composite
def masked_reduces(draw: st.DrawFn) -> tuple[UOp, tuple[Opt, ...], int, int]:
    """out[i] = reduce_r where(mask(r, i), x[i, r] * 2, identity) (or the identity in the other branch), opts on top."""
    rows, cols = draw(st.integers(1, 12)), draw(st.sampled_from([1, 5, 8, 16, 24, 32, 48]))
    op = draw(st.sampled_from([Ops.ADD, Ops.MAX]))
    kind, k, flip = draw(st.integers(0, 4)), draw(st.integers(-3, 6)), draw(st.booleans())
    i, r = loop(rows, 0), red(cols, 1)
    x = glob(1, rows * cols, F32).index(i * cols + r).load() * 2.0
    identity = UOp.const(F32, 0.0 if op is Ops.ADD else -math.inf)
    cond = mask(kind, r, i, k)
    term = cond.ne(True).where(identity, x) if flip else cond.where(x, identity)
    ast = graph_rewrite(UOp.sink(glob(0, rows, F32).index(i).store(term.reduce(r, arg=op))), sym)
    upcast = draw(st.sampled_from([a for a in (1, 2, 4) if rows % a == 0]))
    opts = (Opt(UPCAST, 0, upcast),) if upcast > 1 else ()
    return ast, opts, rows, cols


@settings(max_examples=40, deadline=None)
@given(masked_reduces(), st.integers(0, 2**16))
def test_masked_reduces_give_the_unclipped_kernels_bits(case: tuple[UOp, tuple[Opt, ...], int, int], seed: int) -> None:
    ast, opts, rows, cols = case
    x = np.random.default_rng(seed).standard_normal(rows * cols).astype(np.float32)
    x[::7] = np.inf  # an inf past the bound must stay masked out, not be summed
    peeled: list[bool] = []

    def clip(sink: UOp) -> UOp:
        out = clip_reduce_loops(sink)
        reduces = [sum(u.op is Ops.REDUCE for u in s.toposort()) for s in (sink, out)]
        peeled.append(reduces[1] > reduces[0])
        return out

    for device in ("PYTHON", "CPU"):
        want = unclipped(with_opts(ast, opts), [x], rows, device)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(codegen, "clip_reduce_loops", clip)
            got = run(with_opts(ast, opts), [x], rows, F32, device)
        if device == "PYTHON" and not (peeled[-1] and ast.src[0].src[1].arg is Ops.ADD):
            np.testing.assert_array_equal(got, want)  # the same terms in the same order, less identities
        elif device == "PYTHON":  # a tile's peeled sum adds the unmasked steps' and the rest's accumulators: once
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        else:  # the C sums an innermost loop in SIMD lanes (`omp simd reduction`): lanes split where the loop ends
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_causal_mask_ends_the_loop_at_the_diagonal() -> None:
    i, r = loop(64, 0), red(64, 1)
    x = glob(1, 64 * 64, F32).index(i * 64 + r).load()
    ast = UOp.sink(glob(0, 64, F32).index(i).store((r < i + 1).where(x, 0.0).reduce(r, arg=Ops.ADD)))
    clipped = clip_reduce_loops(graph_rewrite(ast, sym))
    (end,) = [u.src[0] for u in clipped.toposort() if u.op is Ops.RANGE and u.arg[0] == 1]
    assert end.op is not Ops.CONST  # rounded up to a whole vector: (i // 16 + 1) * 16, at most 64
    assert [graph_rewrite(end.substitute({i: i.const_like(v)}), sym).arg for v in (0, 15, 16, 63)] == [16, 16, 32, 64]


def test_an_unmasked_or_prefix_masked_reduce_is_left_alone() -> None:
    i, r = loop(8, 0), red(8, 1)
    x = glob(1, 64, F32).index(i * 8 + r).load()
    for term in (x, (i < r).where(x, 0.0), (r < i).where(x, 1.0)):  # no mask; a prefix of zeros; not the identity
        ast = graph_rewrite(UOp.sink(glob(0, 8, F32).index(i).store(term.reduce(r, arg=Ops.ADD))), sym)
        assert clip_reduce_loops(ast) is ast


def test_a_mask_on_narrow_or_loaded_indexes_is_left_alone() -> None:
    """uint8 indexes wrap past 255 (r = 300 compares as 44) and a loaded bound may change while the kernel runs."""
    i, r = loop(4, 0), red(300, 1)
    x = glob(1, 1200, F32).index(i * 300 + r).load()
    bound = glob(2, 4, dtypes.int32).index(i).load()
    for cond in (r.cast(dtypes.uint8) < (i + 1).cast(dtypes.uint8), r.cast(dtypes.int32) < bound):
        ast = graph_rewrite(UOp.sink(glob(0, 4, F32).index(i).store(cond.where(x, 0.0).reduce(r, arg=Ops.ADD))), sym)
        assert clip_reduce_loops(ast) is ast


def test_a_reduce_around_a_barrier_is_left_alone() -> None:
    """A GPU thread whose loop ended early would skip a barrier its work-group waits at."""
    i, r = loop(64, 0), red(64, 1)
    temp = UOp(Ops.DEFINE_LOCAL, F32.ptr(64, AddrSpace.LOCAL), arg=0)
    written = temp.index(r).store(glob(1, 64 * 64, F32).index(i * 64 + r).load())
    ready = UOp(Ops.AFTER, temp.dtype, (temp, UOp(Ops.BARRIER, dtypes.void, (written,))))
    term = (r < i + 1).where(ready.index(r).load(), 0.0)
    ast = UOp.sink(glob(0, 64, F32).index(i).store(term.reduce(r, arg=Ops.ADD)))
    assert clip_reduce_loops(ast) is ast


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 3), cols=st.sampled_from([8, 16, 40, 64]), seed=st.integers(0, 2**16))
def test_a_causal_softmax_with_its_row_buffer_gives_the_unclipped_bits(rows: int, cols: int, seed: int) -> None:
    """The sum's loop fills the kept exp row (KEEP) only up to its end; the output loop reads 0 past it."""
    x = (np.random.default_rng(seed).standard_normal((rows, cols)) * 4).astype(np.float32)
    g = np.zeros_like(x)
    ast = softmax_ast(rows, cols, masked=True)
    for device in ("PYTHON", "CPU"):
        want = unclipped(ast, [x, g], rows * cols, device)
        got = run(ast, [x, g], rows * cols, F32, device)
        if device == "PYTHON":
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_a_causal_softmax_fills_its_row_buffer_to_the_diagonal() -> None:
    src = to_program(softmax_ast(4, 64, masked=True), Device["CPU"].renderer).src
    assert src.count("exp2f((") == 1  # KEEP still applies
    assert "?acc0[" in src.replace(" ", "")  # the output loop reads the row only below the loop's end


def masked_matmul(m: int, k: int, n: int, shift: int, store_mask: bool) -> UOp:
    """out[i, j] = where(j <= i + shift, sum_e a[i, e] * b[e, j], -inf) (a causal score kernel: the mask on the
    stored value) or sum_e where(e <= i + shift, a[i, e] * b[e, j], 0) (a causal PV product: the mask on the terms)."""
    i, j, e = loop(m, 0), loop(n, 1), red(k, 2)
    product = glob(1, m * k, F32).index(i * k + e).load() * glob(2, k * n, F32).index(e * n + j).load()
    if store_mask:
        value = (i + shift < j).where(-math.inf, product.reduce(e, arg=Ops.ADD))
    else:
        value = (i + shift < e).where(0.0, product).reduce(e, arg=Ops.ADD)
    return graph_rewrite(UOp.sink(glob(0, m * n, F32).index(i * n + j).store(value)), sym)


@settings(max_examples=30, deadline=None)
@given(
    m=st.sampled_from([4, 8, 16, 24]),
    k=st.sampled_from([8, 16, 32]),
    n=st.sampled_from([8, 16, 32]),
    shift=st.integers(-4, 12),
    store_mask=st.booleans(),
    tile=st.sampled_from([(1, 1), (2, 8), (4, 8), (4, 16), (8, 8)]),
    seed=st.integers(0, 2**16),
)
def test_masked_tiles_skip_and_peel_and_match_the_unclipped_kernel(
    m: int,
    k: int,
    n: int,
    shift: int,
    store_mask: bool,
    tile: tuple[int, int],
    seed: int,
) -> None:
    """Register tiles (rows x vector lanes): a dead tile's reduce runs 0 steps; a masked sum runs its clean steps
    without the select, then the masked ones (one reassociation: allclose, not bit for bit)."""
    rows, lanes = tile
    assume(m % rows == 0 and n % lanes == 0)
    opts = tuple(Opt(UPCAST, axis, amount) for axis, amount in ((0, rows), (1, lanes)) if amount > 1)
    ast = masked_matmul(m, k, n, shift, store_mask)
    apply_opts(ast, opts)  # fits
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    for device in ("PYTHON", "CPU"):
        want = unclipped(with_opts(ast, opts), [a, b], m * n, device)
        got = run(with_opts(ast, opts), [a, b], m * n, F32, device)
        if store_mask and device == "PYTHON":
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_a_lane_compare_of_int32_with_index_math(device: str) -> None:
    """int32 math (an offset arange's i + 64) against the lane's index: the threshold is taken in index math."""
    i, j, e = loop(8, 0), loop(16, 1), red(8, 2)
    product = glob(1, 64, F32).index(i * 8 + e).load() * glob(2, 128, F32).index(e * 16 + j).load()
    cond = i.cast(dtypes.int32) + 4 < j.cast(dtypes.int32)
    ast = UOp.sink(glob(0, 128, F32).index(i * 16 + j).store(cond.where(-math.inf, product.reduce(e, arg=Ops.ADD))))
    opts = (Opt(UPCAST, 0, 4), Opt(UPCAST, 1, 8))
    a, b = np.ones((8, 8), np.float32), np.ones((8, 16), np.float32)
    want = np.where(np.arange(8)[:, None] + 4 < np.arange(16), -np.inf, 8.0).ravel()
    np.testing.assert_array_equal(run(with_opts(ast, opts), [a, b], 128, F32, device), want)


def test_the_score_tile_epilogue_masks_by_a_lane_compare_not_lane_by_lane() -> None:
    ast = masked_matmul(32, 16, 32, 0, store_mask=True)
    src = to_program(with_opts(ast, (Opt(UPCAST, 0, 4), Opt(UPCAST, 1, 8))), Device["CPU"].renderer).src
    assert "[0];" not in src  # no lane extracted: the mask is iota < threshold on whole vectors
    assert "?0:" in src.replace(" ", "")  # a dead tile's reduce loop runs 0 steps


@pytest.mark.parametrize("realized_first", [False, True])
@pytest.mark.parametrize("training", [False, True])  # masked kernels outside training, the plain product in it
@pytest.mark.parametrize("shape", [(1, 2, 40, 16), (2, 3, 64, 32), (1, 1, 100, 8)])
def test_causal_attention_matches_torch_forward_and_backward(
    shape: tuple[int, ...], training: bool, realized_first: bool
) -> None:
    """realized_first: the output read before backward (test/llm's block test does). A realized intermediate of the
    forward (a contiguous) is a buffer in the graph backward then walks, so the masked path must not make one: it
    cut the gradients of q and k to nothing (a mid-session CI caught it)."""
    with Tensor.train(training):
        check_causal_attention(shape, realized_first)


def check_causal_attention(shape: tuple[int, ...], realized_first: bool = False) -> None:
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    g = rng.standard_normal(shape).astype(np.float32)
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    (ref * torch.from_numpy(g)).sum().backward()
    fq, fk, fv = (Tensor(x, requires_grad=True) for x in (q, k, v))
    out = fq.scaled_dot_product_attention(fk, fv, is_causal=True)
    if realized_first:
        np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    (out * Tensor(g)).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    for mine, theirs in ((fq, tq), (fk, tk), (fv, tv)):
        assert mine.grad is not None
        assert theirs.grad is not None
        np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_causal_attention_ignores_values_past_the_diagonal() -> None:
    """Masked positions have weight 0 and their values are never read: an inf in a later position's value leaves
    the earlier rows finite (as torch's causal kernel)."""
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 1, 24, 8)).astype(np.float32) for _ in range(3))
    v[0, 0, 20] = np.inf
    out = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), is_causal=True).numpy()
    assert np.isfinite(out[0, 0, :20]).all()


@pytest.mark.timeout(60)
def test_the_guard_walk_costs_once_per_node_not_once_per_path() -> None:
    """30 nested wheres each reading the last one three times: 3^30 paths from the store to the reduce. The walk that
    finds each reduce's guards followed every path (a CI job timed out on `base ** exponent` for ints); it now meets
    at each node once and compiles in well under a second."""
    x = Tensor(np.arange(-8, 8, dtype=np.int32).reshape(4, 4))
    want = x.numpy()
    for _ in range(30):
        x = (x > 0).where(x - 1, x + 2)
        want = np.where(want > 0, want - 1, want + 2)
    np.testing.assert_array_equal(x.sum(axis=1).numpy(), want.sum(axis=1))
