"""Tests for fusegrad/mixin/reduce.py: reductions, cumulative ops and sorting against torch (CPU).

Shapes come from short fixed lists (scalars, size-0 and size-1 axes included) so the compile cache is reused. The
blocked scan and the bitonic sort only run on long axes; tests reach them on short ones by lowering
`SCAN_BLOCK` / `RANK_SORT_MAX`. Ops returning (values, indices) realize both in one schedule.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

import fusegrad.mixin.reduce as reduce_module
from fusegrad import Tensor
from fusegrad.dtype import DType, dtypes
from test.shared import assert_matches as check  # the one comparison helper, named for these tables

NP_DTYPES: dict[DType, Any] = {dtypes.float32: np.float32, dtypes.float16: np.float16, dtypes.int32: np.int32}
Axis = int | tuple[int, ...] | None


# *** helpers ***


def data(shape: tuple[int, ...], dt: DType, seed: int = 0, specials: tuple[float, ...] = ()) -> np.ndarray:
    """Random values of `dt` (floats in [-3, 3), ints in [-3, 3], bools half True), `specials` first."""
    rng = np.random.default_rng(seed)
    if dt == dtypes.bool:
        return np.asarray(rng.random(shape) < 0.5)
    if dtypes.is_int(dt):
        return rng.integers(-3, 3, size=shape, endpoint=True).astype(np.int32)
    values = rng.uniform(-3, 3, size=shape).reshape(-1)
    values[: len(specials)] = specials[: values.size]
    return values.astype(NP_DTYPES[dt]).reshape(shape)


def torch_of(arr: np.ndarray) -> torch.Tensor:
    """The torch tensor of `arr`; float16 goes in as float32 (a more accurate reference for the same inputs)."""
    return torch.from_numpy(arr.astype(np.float32) if arr.dtype == np.float16 else arr.copy())


def torch_dims(axis: Axis, ndim: int) -> tuple[int, ...]:
    return tuple(range(ndim)) if axis is None else (axis,) if isinstance(axis, int) else axis


def check_pair(got: tuple[Tensor, Tensor], ref: Any, dtype: DType | None = None, atol: float | None = None) -> None:
    """(values, int32 indices) against torch's pair, realized together."""
    got[0].realize(got[1])
    check(got[0], ref[0], dtype, atol=atol)
    check(got[1], ref[1], dtypes.int32)


# *** any / all ***

REDUCE_CASES: list[tuple[tuple[int, ...], Axis]] = [
    ((3, 4, 5), None),
    ((3, 4, 5), 1),
    ((3, 4, 5), (0, -1)),
    ((), None),
    ((0,), 0),
    ((3, 0), 1),
    ((3, 0), 0),
    ((1, 1, 4), -1),
]
ANY_CASES = [(s, a, dtypes.bool) for s, a in REDUCE_CASES] + [(s, a, dtypes.float32) for s, a in REDUCE_CASES[1:4]]


@pytest.mark.parametrize(("shape", "axis", "dtype"), ANY_CASES, ids=str)
def test_any_all(shape: tuple[int, ...], axis: Axis, dtype: DType) -> None:
    arr = data(shape, dtype)
    if dtype == dtypes.float32:
        arr = np.where(arr > 2.5, arr, 0).astype(np.float32)  # mostly zeros: both answers occur
    ta, dims = torch_of(arr), torch_dims(axis, arr.ndim)
    check(Tensor(arr).any(axis), torch.any(ta, dim=dims) if dims else ta.bool(), dtypes.bool)
    check(Tensor(arr).all(axis), torch.all(ta, dim=dims) if dims else ta.bool(), dtypes.bool)


def test_any_all_keepdim_and_ints() -> None:
    arr = data((3, 4, 5), dtypes.int32)
    check(Tensor(arr).any((0, 2), keepdim=True), torch.any(torch_of(arr), dim=(0, 2), keepdim=True))
    check(Tensor(arr).all(1, keepdim=True), torch.all(torch_of(arr), dim=1, keepdim=True))


# *** argmax / argmin ***

ARG_CASES: list[tuple[tuple[int, ...], int | None, bool]] = [
    ((4, 8), None, False),
    ((4, 8), None, True),
    ((4, 8), 0, False),
    ((4, 8), -1, True),
    ((7,), 0, False),
    ((), None, False),
    ((), 0, True),
    ((1, 5), 0, False),
    ((2, 0), 0, False),
]
ARG_DTYPE_CASES = [(*c, dtypes.int32) for c in ARG_CASES] + [(*c, dtypes.float32) for c in ARG_CASES[:6]]


@pytest.mark.parametrize(("shape", "axis", "keepdim", "dtype"), ARG_DTYPE_CASES, ids=str)
def test_argmax_argmin(shape: tuple[int, ...], axis: int | None, keepdim: bool, dtype: DType) -> None:
    arr = data(shape, dtype, specials=(1.0, math.nan, -2.0, math.nan, 1.0))  # ints tie often; NaN wins
    ta = torch_of(arr)
    check(Tensor(arr).argmax(axis, keepdim), torch.argmax(ta, axis, keepdim), dtypes.int32)
    check(Tensor(arr).argmin(axis, keepdim), torch.argmin(ta, axis, keepdim), dtypes.int32)


def test_argmax_ties_take_the_first_index() -> None:
    check(Tensor([[1, 3, 3, 0], [2, 2, 2, 2]]).argmax(1), [1, 0])
    check(Tensor([[1, 0, 0, 3], [2, 2, 2, 2]]).argmin(1), [1, 0])
    check(Tensor([True, False, True]).argmax(), 0)
    check(Tensor([True, False, False]).argmin(), 1)


def test_argmax_of_an_empty_axis_raises() -> None:
    with pytest.raises(ValueError, match=r"argmax: cannot reduce axis 1 of size 0 in shape \(2, 0\)"):
        Tensor.zeros(2, 0).argmax(1)
    with pytest.raises(ValueError, match="argmin: cannot reduce axis 0 of size 0"):
        Tensor.zeros(0).argmin()
    with pytest.raises(IndexError, match="argmax: axis 2 out of range for 2-d tensor"):
        Tensor.zeros(2, 3).argmax(2)


# *** var / std ***

VAR_CASES: list[tuple[tuple[int, ...], Axis, float, bool]] = [
    ((4, 8), None, 1, False),
    ((4, 8), 1, 0, True),
    ((4, 8), (0, 1), 2, True),
    ((4, 8), 0, 5, False),  # correction >= N: x / 0
    ((4, 8), -1, 0.5, False),
    ((1,), None, 1, False),  # one element: 0 / 0
    ((), None, 0, True),
    ((0, 3), 0, 1, False),  # empty: nan
    ((2, 0, 3), 1, 1, True),
]


@pytest.mark.filterwarnings("ignore:var\\(\\)")  # torch warns about correction >= N
@pytest.mark.parametrize(("shape", "axis", "correction", "keepdim"), VAR_CASES, ids=str)
def test_var_std(shape: tuple[int, ...], axis: Axis, correction: float, keepdim: bool) -> None:
    arr = data(shape, dtypes.float32)
    ta, dims = torch_of(arr).double(), torch_dims(axis, arr.ndim)
    var = torch.var(ta, dim=dims, correction=correction, keepdim=keepdim).float()
    check(Tensor(arr).var(axis, keepdim, correction), var, dtypes.float32)
    check(Tensor(arr).std(axis, keepdim, correction=correction), var.sqrt(), dtypes.float32)


def test_var_std_mean_and_dtypes() -> None:
    arr = data((4, 8), dtypes.float32)
    ta = torch_of(arr).double()
    var, mean = Tensor(arr).var_mean(1, correction=0)
    ref_var, ref_mean = torch.var_mean(ta, dim=1, correction=0)
    check(var, ref_var.float(), dtypes.float32)
    check(mean, ref_mean.float(), dtypes.float32)
    std, mean = Tensor(arr).std_mean(keepdim=True)
    ref_std, ref_mean = torch.std_mean(ta, dim=(0, 1), keepdim=True)
    check(std, ref_std.float(), dtypes.float32)
    check(mean, ref_mean.float(), dtypes.float32)
    half = data((4, 8), dtypes.float16)
    check(Tensor(half).var(0), torch.var(torch_of(half).double(), dim=0).float(), dtypes.float16)
    i = data((4, 8), dtypes.int32)
    check(Tensor(i).std(1), torch.std(torch_of(i).double(), dim=1).float(), dtypes.float32)


# *** logsumexp / softmin ***

LSE_SPECIALS = (math.inf, 1.0, -math.inf, -math.inf, 5.0, math.nan, 2.0, 1e30)


@pytest.mark.parametrize(
    ("shape", "axis"), [((4, 8), None), ((4, 8), 1), ((4, 8), 0), ((), None), ((3, 0), 1)], ids=str
)
def test_logsumexp(shape: tuple[int, ...], axis: Axis) -> None:
    arr = np.asarray(data(shape, dtypes.float32, specials=LSE_SPECIALS) * np.float32(10))
    if arr.ndim == 2 and arr.shape[1]:
        arr[1] = -math.inf  # a row of -inf gives -inf, not nan
    ta, dims = torch_of(arr), torch_dims(axis, arr.ndim)
    check(Tensor(arr).logsumexp(axis), torch.logsumexp(ta, dim=dims), dtypes.float32)
    check(Tensor(arr).logsumexp(axis, keepdim=True), torch.logsumexp(ta, dim=dims, keepdim=True), dtypes.float32)


def test_logsumexp_dtypes() -> None:
    half, i = data((4, 8), dtypes.float16), data((4, 8), dtypes.int32)
    check(Tensor(half).logsumexp(1), torch.logsumexp(torch_of(half), dim=1), dtypes.float16)
    check(Tensor(i).logsumexp(0), torch.logsumexp(torch_of(i).float(), dim=0), dtypes.float32)


def test_softmin() -> None:
    arr = data((4, 8), dtypes.float32)
    check(Tensor(arr).softmin(), torch.softmax(-torch_of(arr), dim=-1), dtypes.float32)
    check(Tensor(arr).softmin(0), torch.softmax(-torch_of(arr), dim=0), dtypes.float32)
    check(
        Tensor(data((4, 8), dtypes.int32)).softmin(1), torch.softmax(-torch_of(data((4, 8), dtypes.int32)).float(), 1)
    )


# softmax, log_softmax and prod with dtype= (as the reference has them)

SOFTMAX_CASES: list[tuple[tuple[int, ...], int]] = [((4, 8), -1), ((4, 8), 0), ((3, 1), 1), ((2, 0, 3), 2), ((), 0)]


@pytest.mark.parametrize(("shape", "axis"), SOFTMAX_CASES, ids=str)
@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float16], ids=str)
def test_softmax_log_softmax_with_dtype(shape: tuple[int, ...], axis: int, dt: DType) -> None:
    arr = data(shape, dt)
    ta = torch_of(arr)
    for ours, theirs in ((Tensor.softmax, torch.softmax), (Tensor.log_softmax, torch.log_softmax)):
        check(ours(Tensor(arr), axis), theirs(ta, axis), dt)
        check(ours(Tensor(arr), axis, dtype=dtypes.float32), theirs(ta, axis, dtype=torch.float32), dtypes.float32)
    ints = data((4, 8), dtypes.int32)
    check(Tensor.softmax(Tensor(ints), 1), torch.softmax(torch_of(ints).float(), 1), dtypes.float32)


def test_softmax_with_dtype_backward_and_errors() -> None:
    arr, upstream = data((4, 8), dtypes.float16), data((4, 8), dtypes.float32, seed=2)
    x = Tensor(arr, requires_grad=True)
    (Tensor.log_softmax(x, 1, dtype=dtypes.float32) * Tensor(upstream)).sum().backward()
    tx = torch.from_numpy(arr.copy()).requires_grad_()
    (torch.log_softmax(tx, 1, dtype=torch.float32) * torch.from_numpy(upstream)).sum().backward()
    assert x.grad is not None
    check(x.grad, tx.grad, dtypes.float16)
    with pytest.raises(TypeError, match=r"softmax: dtype must be a float dtype, got dtypes.int, expected"):
        Tensor.softmax(Tensor(arr), dtype=dtypes.int32)
    with pytest.raises(TypeError, match=r"log_softmax: dtype must be a float dtype, got dtypes.bool"):
        Tensor.log_softmax(Tensor(arr), dtype="bool")
    with pytest.raises(IndexError, match=r"softmax: axis 2 out of range for 2-d tensor \(-2..1\)"):
        Tensor.softmax(Tensor(arr), 2, dtype=dtypes.float32)


PROD_CASES: list[tuple[tuple[int, ...], int | None]] = [
    ((3, 4), None),
    ((3, 4), 1),
    ((2, 0), 1),
    ((2, 0), 0),
    ((), None),
]


@pytest.mark.parametrize(("shape", "axis"), PROD_CASES, ids=str)
def test_prod_with_dtype(shape: tuple[int, ...], axis: int | None) -> None:
    arr, ints = data(shape, dtypes.float32), data(shape, dtypes.int32)
    dims = torch_dims(axis, len(shape))
    ref, int_ref = torch_of(arr).double(), torch_of(ints)
    for d in dims[::-1]:
        ref, int_ref = ref.prod(d), int_ref.prod(d)
    check(Tensor.prod(Tensor(arr), axis, dtype=dtypes.float64), ref, dtypes.float64)
    check(Tensor.prod(Tensor(arr), axis), ref.float(), dtypes.float32)
    check(Tensor.prod(Tensor(ints), axis), int_ref, dtypes.int32)  # the reference keeps int32 (torch: int64)
    # dtype casts first, like the reference: 1.5 * 2.5 as ints is 1 * 2
    assert Tensor.prod(Tensor([1.5, 2.5]), dtype=dtypes.int32).item() == 2


# *** cumulative ***

SCAN_CASES: list[tuple[tuple[int, ...], int]] = [((7,), 0), ((4, 8), 1), ((4, 8), 0), ((4, 8), -1), ((), 0), ((0,), 0)]
SCAN_SPECIALS = (1.0, 1.0, -math.inf, 2.0, math.nan, 0.5, 2.0, math.inf)


@pytest.mark.parametrize(("shape", "axis"), SCAN_CASES, ids=str)
def test_cumsum_cumprod(shape: tuple[int, ...], axis: int) -> None:
    f, i, b = data(shape, dtypes.float32), data(shape, dtypes.int32), data(shape, dtypes.bool)
    check(Tensor(f).cumsum(axis), torch.cumsum(torch_of(f), axis), dtypes.float32)
    check(Tensor(i).cumsum(axis), torch.cumsum(torch_of(i), axis), dtypes.int32)
    check(Tensor(b).cumsum(axis), torch.cumsum(torch_of(b), axis), dtypes.int32)
    check(Tensor(f).cumprod(axis), torch.cumprod(torch_of(f), axis), dtypes.float32)
    check(Tensor(i).cumprod(axis), torch.cumprod(torch_of(i), axis), dtypes.int32)


@pytest.mark.parametrize(("shape", "axis"), SCAN_CASES, ids=str)
def test_cummax_cummin(shape: tuple[int, ...], axis: int) -> None:
    f, i = data(shape, dtypes.float32, specials=SCAN_SPECIALS), data(shape, dtypes.int32)
    check_pair(Tensor(f).cummax(axis), torch.cummax(torch_of(f), axis), dtypes.float32)
    check_pair(Tensor(f).cummin(axis), torch.cummin(torch_of(f), axis), dtypes.float32)
    if len(shape) == 1:  # ints tie often: ties take the latest index
        check_pair(Tensor(i).cummax(axis), torch.cummax(torch_of(i), axis), dtypes.int32)
        check_pair(Tensor(i).cummin(axis), torch.cummin(torch_of(i), axis), dtypes.int32)


@pytest.mark.parametrize(("shape", "axis"), SCAN_CASES, ids=str)
def test_logcumsumexp(shape: tuple[int, ...], axis: int) -> None:
    arr = data(shape, dtypes.float32, specials=(-1000.0, 0.0, -math.inf, 80.0, math.inf, 1.0, math.nan, 2.0))
    check(Tensor(arr).logcumsumexp(axis), torch.logcumsumexp(torch_of(arr), axis), dtypes.float32)


def test_cumulative_dtypes() -> None:
    half = data((4, 8), dtypes.float16)
    check(Tensor(half).cumsum(1), torch.cumsum(torch_of(half), 1), dtypes.float16)
    check(Tensor(half).cumprod(1), torch.cumprod(torch_of(half), 1), dtypes.float16)
    check(Tensor(half).logcumsumexp(1), torch.logcumsumexp(torch_of(half), 1), dtypes.float16)
    check(
        Tensor(data((4, 8), dtypes.int32)).logcumsumexp(1),
        torch.logcumsumexp(torch_of(data((4, 8), dtypes.int32)).float(), 1),
    )
    check(Tensor([True, False, True]).cumprod(0), [True, False, False], dtypes.bool)
    with pytest.raises(IndexError, match="cumsum: axis 2 out of range for 2-d tensor"):
        Tensor.zeros(2, 3).cumsum(2)


def test_blocked_scans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Axes longer than 2 * SCAN_BLOCK: scanned per block plus a recursive scan of the block totals."""
    monkeypatch.setattr(reduce_module, "SCAN_BLOCK", 3)  # 20 -> 7 blocks -> 3 blocks: two levels of recursion
    f = data((3, 20), dtypes.float32, specials=SCAN_SPECIALS)
    i = data((3, 20), dtypes.int32)
    check(Tensor(f).cumsum(1), torch.cumsum(torch_of(f), 1), dtypes.float32)
    check(Tensor(i).cumsum(1), torch.cumsum(torch_of(i), 1), dtypes.int32)
    check(Tensor(i.clip(-1, 1)).cumprod(1), torch.cumprod(torch_of(i.clip(-1, 1)), 1), dtypes.int32)
    check_pair(Tensor(f).cummax(1), torch.cummax(torch_of(f), 1), dtypes.float32)
    check_pair(Tensor(i).cummin(1), torch.cummin(torch_of(i), 1), dtypes.int32)
    lse = data((3, 20), dtypes.float32, specials=(-1000.0, -math.inf, -math.inf, -math.inf, 0.0, 50.0)) * np.float32(5)
    check(Tensor(lse).logcumsumexp(1), torch.logcumsumexp(torch_of(lse), 1), dtypes.float32)


def test_long_cumsum() -> None:
    """1000 elements: the default block size splits the axis (4 blocks of 256)."""
    f = data((1000,), dtypes.float32)
    check(Tensor(f).cumsum(), torch.cumsum(torch_of(f).double(), 0).float(), dtypes.float32, atol=1e-4)
    check(Tensor.ones(1000, dtype=dtypes.int32).cumsum(), np.arange(1, 1001), dtypes.int32)


# *** sort / argsort / topk ***

SORT_SPECIALS = (0.0, -0.0, math.nan, 1.0, 1.0, -math.inf, math.inf, math.nan, 0.0, -1.0, 1.0)
SORT_CASES: list[tuple[tuple[int, ...], int]] = [
    ((4, 11), -1),
    ((11, 3), 0),
    ((), 0),
    ((1,), 0),
    ((5, 1), -1),
    ((3, 0), 0),
]


def ref_sort(arr: np.ndarray, dim: int, descending: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.sort(torch_of(arr), dim=dim, descending=descending, stable=True)  # type: ignore[no-any-return]


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize(("shape", "dim"), SORT_CASES, ids=str)
def test_sort(shape: tuple[int, ...], dim: int, descending: bool) -> None:
    f, i = data(shape, dtypes.float32, specials=SORT_SPECIALS), data(shape, dtypes.int32)
    check_pair(Tensor(f).sort(dim, descending), ref_sort(f, dim, descending), dtypes.float32, atol=0)
    check_pair(Tensor(i).sort(dim, descending), ref_sort(i, dim, descending), dtypes.int32)
    check(Tensor(i).argsort(dim, descending), ref_sort(i, dim, descending)[1], dtypes.int32)


def test_sort_keeps_negative_zero_and_other_dtypes() -> None:
    values, _ = Tensor([0.0, -0.0, 1.0, -0.0]).sort()
    assert [math.copysign(1, v) for v in values.tolist()] == [1, -1, -1, 1]  # equal, so in input order
    b = data((4, 11), dtypes.bool)
    check_pair(Tensor(b).sort(), ref_sort(b, -1, False), dtypes.bool)
    half = data((4, 11), dtypes.float16, specials=SORT_SPECIALS)
    check_pair(Tensor(half).sort(descending=True), ref_sort(half, -1, True), dtypes.float16)


BITONIC_CASES: list[tuple[tuple[int, ...], int, bool, DType]] = [
    ((3, 7), -1, False, dtypes.int32),
    ((2, 7), 1, True, dtypes.float32),
    ((13, 2), 0, False, dtypes.int32),
]


@pytest.mark.parametrize(("shape", "dim", "descending", "dtype"), BITONIC_CASES, ids=str)
def test_bitonic_sort(
    monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...], dim: int, descending: bool, dtype: DType
) -> None:
    """The network for long axes, forced on short ones: padding, duplicates, NaN and -0.0 as in the rank sort."""
    monkeypatch.setattr(reduce_module, "RANK_SORT_MAX", 1)
    arr = data(shape, dtype, specials=SORT_SPECIALS)
    check_pair(Tensor(arr).sort(dim, descending), ref_sort(arr, dim, descending), dtype)


def test_sort_outputs_realized_one_at_a_time() -> None:
    values, idx = Tensor([[3, 1, 2, 1], [0, 5, -1, 2]]).sort(1)
    assert values.tolist() == [[1, 1, 2, 3], [-1, 0, 2, 5]]
    assert idx.tolist() == [[1, 3, 2, 0], [2, 0, 3, 1]]


def test_gate_and_gated_compare_compiles() -> None:
    x = Tensor(np.arange(14, dtype=np.int32).reshape(2, 7)).pad([None, (0, 1)]).reshape(2, 4, 2)
    i = Tensor.arange(8).reshape(4, 2)
    assert ((i[..., 1] < 7) & (x[..., 1] < x[..., 0])).tolist() == [[False] * 4] * 2


@pytest.mark.parametrize(
    ("k", "dim", "largest"), [(3, -1, True), (0, -1, True), (11, 1, False), (2, 0, False)], ids=str
)
def test_topk(k: int, dim: int, largest: bool) -> None:
    arr = data((4, 11), dtypes.int32)
    values, idx = Tensor(arr).topk(k, dim, largest)
    ref_values, ref_idx = ref_sort(arr, dim, largest)
    keep = [slice(None)] * 2
    keep[dim] = slice(0, k)
    check_pair((values, idx), (ref_values[tuple(keep)], ref_idx[tuple(keep)]), dtypes.int32)  # stable among ties
    check(values, torch.topk(torch_of(arr), k, dim, largest).values)


def test_topk_unsorted_and_errors() -> None:
    f = data((4, 11), dtypes.float32)
    values, idx = Tensor(f).topk(3, sorted_=False)
    check_pair((values, idx), torch.topk(torch_of(f), 3))  # distinct values: the order is the sorted one
    with pytest.raises(ValueError, match=r"topk: k=12 out of range for dim -1 of size 11 \(0..11\)"):
        Tensor(f).topk(12)
    with pytest.raises(IndexError, match="sort: axis 2 out of range for 2-d tensor"):
        Tensor(f).sort(2)


# *** backward (where autograd exists) ***

needs_backward = pytest.mark.skipif(not hasattr(Tensor, "backward"), reason="Tensor.backward is not implemented yet")
BACKWARD_OPS = {
    "logsumexp": (lambda t: t.logsumexp(1), lambda t: torch.logsumexp(t, 1)),
    "var": (lambda t: t.var(0), lambda t: torch.var(t, 0)),
    "std": (lambda t: t.std(), lambda t: torch.std(t)),
    "cumsum": (lambda t: t.cumsum(1) * t, lambda t: torch.cumsum(t, 1) * t),
    "softmin": (lambda t: t.softmin(1) * t, lambda t: torch.nn.functional.softmin(t, 1) * t),
    "logcumsumexp": (lambda t: t.logcumsumexp(1), lambda t: torch.logcumsumexp(t, 1)),
}


@needs_backward
@pytest.mark.parametrize("name", BACKWARD_OPS.keys())
def test_backward_matches_torch(name: str) -> None:
    fg_op, torch_op = BACKWARD_OPS[name]
    arr = data((4, 8), dtypes.float32, seed=3)
    x = Tensor(arr, requires_grad=True)
    fg_op(x).sum().backward()
    tx = torch.from_numpy(arr.copy()).requires_grad_()
    torch_op(tx).sum().backward()
    assert x.grad is not None
    assert tx.grad is not None
    check(x.grad, tx.grad, dtypes.float32, rtol=1e-4, atol=1e-5)


@needs_backward
def test_std_of_equal_values_has_zero_gradient() -> None:
    values = [[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]]
    x = Tensor(values, requires_grad=True)
    out = x.std(1)
    out.sum().backward()
    tx = torch.tensor(values, requires_grad=True)
    want = torch.std(tx, 1)
    want.sum().backward()
    assert x.grad is not None
    check(out, want, dtypes.float32)
    check(x.grad, tx.grad, dtypes.float32)  # torch: 0 where the std is 0 (not sqrt's inf times 0)
    assert math.isnan(Tensor([2.0]).std().item())  # one element, correction 1: 0 / 0
