"""The one-term sum collapses (fusegrad/codegen/gather.py): `sum_r (x == r ? v(r) : 0)` becomes a gated read of v(x);
a pool's backward window sum with stride equal to its kernel becomes its one term (checked against torch).
Soundness: random index tensors (in range, past the end, negative) of every int dtype and random value expressions,
run on CPU and PYTHON against numpy; the collapsed kernel has no reduce loop and no counted ops for a bare lookup;
lossy casts of the range are left alone (and stay right)."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad import Tensor, nn
from fusegrad.codegen import full_rewrite, to_program
from fusegrad.codegen.gather import collapse_one_hot_sum, collapse_window_sum
from fusegrad.dtype import dtypes
from fusegrad.helpers import Context, GlobalCounters
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp

INDEX_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32]
# value expressions of the one-hot row r: a bare lookup, arithmetic on it, and r itself used as a value
VALUES = {
    "lookup": lambda w, r: w,
    "affine": lambda w, r: w * 2 + 1,
    "row number": lambda w, r: r.cast(dtypes.float32) + w * 0,
}


def one_hot_sum(idx: Tensor, table: Tensor, value: str) -> Tensor:
    """sum over rows r of (idx == r ? f(table[r], r) : 0): (*idx, columns)."""
    rows = Tensor.arange(table.shape[0], device=table.device)  # (N,)
    hits = (idx.unsqueeze(-1) == rows.cast(idx.dtype)).unsqueeze(-1)  # (*idx, N, 1)
    return hits.where(VALUES[value](table, rows.unsqueeze(-1)), 0).sum(-2)  # (*idx, N, C) -> (*idx, C)


def expected(idx: np.ndarray, table: np.ndarray, value: str) -> np.ndarray:
    rows = np.arange(table.shape[0], dtype=np.float32)[:, None]
    per_row = {"lookup": table, "affine": table * 2 + 1, "row number": rows + table * 0}[value]
    inside = (idx.astype(np.int64) >= 0) & (idx.astype(np.int64) < table.shape[0])
    return np.where(inside[..., None], per_row[np.clip(idx.astype(np.int64), 0, table.shape[0] - 1)], 0)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 9),
    columns=st.integers(1, 3),
    dtype=st.sampled_from(INDEX_DTYPES),
    value=st.sampled_from(sorted(VALUES)),
    device=st.sampled_from(["CPU", "PYTHON"]),
    data=st.data(),
)
def test_one_hot_sums_match_numpy(
    n: int, columns: int, dtype: type, value: str, device: str, data: st.DataObject
) -> None:
    info = np.iinfo(dtype)
    picks = st.integers(max(int(info.min), -3), min(int(info.max), n + 3))  # in range, just past either end
    idx = np.array(data.draw(st.lists(picks, min_size=1, max_size=6)), dtype=dtype)
    table = np.random.default_rng(n).standard_normal((n, columns)).astype(np.float32)
    out = one_hot_sum(Tensor(idx).to(device), Tensor(table).to(device), value)
    assert reduce_loops(out) == 0  # collapsed: every index dtype holds the row numbers
    np.testing.assert_allclose(out.numpy(), expected(idx, table, value), rtol=1e-6)


def reduce_loops(t: Tensor) -> int:
    """How many reduce loops the kernels computing t have (the schedule is only inspected, not run)."""
    asts = [ei.ast for ei in t.schedule() if ei.ast.op is Ops.SINK]
    programs = [full_rewrite(ast, ClangRenderer()) for ast in asts]
    return sum(u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE for program in programs for u in program)


def test_embedding_is_one_gated_read() -> None:
    layer = nn.Embedding(20, 30)
    layer.weight = Tensor.zeros_like(layer.weight).contiguous().realize()
    idx = Tensor([[1, 2, 3], [4, 5, 19]]).realize()
    assert reduce_loops(layer(idx)) == 0
    for noopt in (0, 1):
        with Context(NOOPT=noopt):
            GlobalCounters.reset()
            layer(idx).realize()
            assert GlobalCounters.global_ops == 0  # a gated load per output; its gate is address work, not ops


def test_lossy_cast_of_the_range_is_left_alone() -> None:
    """(x == int8(r)) over 300 rows: r = 44 and r = 300 - 256 + 44 both cast to 44, so the sum is not one term."""
    r = UOp.range(300, 0, AxisType.REDUCE)
    x = UOp(Ops.DEFINE_GLOBAL, dtypes.int8.ptr(1), arg=1).index(UOp.const(dtypes.index, 0)).load()
    body = x.eq(r.cast(dtypes.int8)).where(UOp.const(dtypes.float32, 1.0), UOp.const(dtypes.float32, 0.0))
    assert collapse_one_hot_sum(UOp(Ops.REDUCE, dtypes.float32, (body, r), Ops.ADD)) is None
    idx = Tensor(np.array([44, -100, 127], dtype=np.int8))
    hits = (idx.unsqueeze(-1) == Tensor.arange(300).cast(dtypes.int8)).cast(dtypes.float32).sum(-1)
    wrapped = (np.arange(300).astype(np.int8)[None, :] == np.array([44, -100, 127], dtype=np.int8)[:, None]).sum(-1)
    assert hits.tolist() == wrapped.astype(np.float32).tolist()


# *** window sums whose windows don't overlap: sum_r ((x - r) % N == 0 ? v(r) : 0) over r in [0, N) -> v(x % N) ***

POOLS = {
    "max": (Tensor.max_pool2d, torch.nn.functional.max_pool2d),
    "avg": (Tensor.avg_pool2d, torch.nn.functional.avg_pool2d),
}


@settings(max_examples=30, deadline=None)
@given(
    pool=st.sampled_from(sorted(POOLS)),
    kernel=st.integers(2, 3),
    stride_step=st.sampled_from([0, -1, 1]),  # stride = kernel (collapsed), overlapping windows, gaps between them
    size=st.integers(3, 9),
    device=st.sampled_from(["CPU", "PYTHON"]),
)
def test_pool_gradients_match_torch(pool: str, kernel: int, stride_step: int, size: int, device: str) -> None:
    """Pool backward, whose window sums collapse where the stride equals the kernel, against torch (ties included:
    a relu before the pool makes zeros)."""
    stride = kernel + stride_step
    if size < kernel:
        return
    x = np.random.default_rng(size * 10 + kernel).standard_normal((2, 3, size, size + 1)).astype(np.float32)
    ours, theirs = POOLS[pool]
    t = Tensor(x, device=device, requires_grad=True)
    (ours(t.relu(), kernel, stride) ** 2).sum().backward()
    tt = torch.tensor(x, requires_grad=True)
    (theirs(tt.relu(), kernel, stride) ** 2).sum().backward()
    assert t.grad is not None
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_avg_pool_gradient_with_stride_equal_to_kernel_has_no_reduce_loop() -> None:
    t = Tensor(np.ones((2, 3, 8, 8), dtype=np.float32), requires_grad=True)
    t.avg_pool2d(2).sum().backward()
    assert t.grad is not None
    assert reduce_loops(t.grad) == 0
    # the one term's window position (x - x % 2) // 2 folds to x // 2: no remainder left in the index math
    sources = [to_program(ei.ast, ClangRenderer()).src for ei in t.grad.schedule() if ei.ast.op is Ops.SINK]
    assert not any("%" in src[src.index("void") :] for src in sources)


def test_overlapping_windows_keep_their_sum() -> None:
    """(x - r) % 2 == 0 over r in [0, 3): r = x % 2 and r = x % 2 + 2 may both hold, so the sum stays."""
    r, x = UOp.range(3, 1, AxisType.REDUCE), UOp.range(9, 0, AxisType.LOOP)
    cond = ((x - r) % 2).eq(0)
    body = cond.where(UOp.const(dtypes.float32, 1.0), UOp.const(dtypes.float32, 0.0))
    assert collapse_window_sum(UOp(Ops.REDUCE, dtypes.float32, (body, r), Ops.ADD)) is None
    r2 = UOp.range(2, 1, AxisType.REDUCE)
    body2 = ((x - r2) % 2).eq(0).where(UOp.const(dtypes.float32, 1.0), UOp.const(dtypes.float32, 0.0))
    assert collapse_window_sum(UOp(Ops.REDUCE, dtypes.float32, (body2, r2), Ops.ADD)) is not None
