"""Tensor methods: reductions beyond sum/max/min/mean (any, argmax, var, logsumexp, cumsum, sort, topk).

Built from the core reductions, movement ops and `where`. Cumulative ops scan blocks of at most `SCAN_BLOCK`
elements with a masked reduction (one fused kernel) and combine block totals recursively, so a scan of n elements
costs O(n * SCAN_BLOCK) work. `sort` ranks all pairs for short axes (one kernel) and runs a bitonic network for
longer ones (log2(n)^2 / 2 kernels of O(n) work).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fusegrad.dtype import (
    ConstType,
    DType,
    DTypeLike,
    dtypes,
    least_upper_dtype,
    least_upper_float,
    sum_acc_dtype,
    to_dtype,
)
from fusegrad.mixin import traced
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp, smax

if TYPE_CHECKING:
    from fusegrad.tensor import Tensor

SCAN_BLOCK = 256  # scans longer than 2 * SCAN_BLOCK are split into blocks of this size
RANK_SORT_MAX = 64  # sorts of at most this many elements rank all pairs (O(n^2) work, one kernel)

Axis = int | Sequence[int] | None


@dataclass(frozen=True, slots=True)
class _Scan:
    """One associative operator for cumulative ops: `block` reduces the masked (..., i, j) rows of a block to
    (..., i), `combine` merges a block prefix into a block, `identity(dtype)` pads."""

    block: Callable[[Tensor, Tensor], Tensor]
    combine: Callable[[Tensor, Tensor], Tensor]
    identity: Callable[[DType], ConstType]


def _lse_rows(rows: Tensor, mask: Tensor) -> Tensor:
    """log(sum(exp(rows))) over the masked last axis, shifted by each row's max so nothing overflows."""
    m = mask.where(rows, -math.inf).max(-1, keepdim=True)
    m = m.isinf().where(0, m)  # an infinite max would give inf - inf = nan below
    return mask.where(rows - m, -math.inf).exp().sum(-1).log() + m.squeeze(-1)


_SCAN_ADD = _Scan(lambda r, m: m.where(r, 0).sum(-1), lambda x, y: x + y, lambda dt: 0)
_SCAN_MUL = _Scan(lambda r, m: m.where(r, 1).prod(-1), lambda x, y: x * y, lambda dt: 1)
_SCAN_MAX = _Scan(lambda r, m: m.where(r, dtypes.min(r.dtype)).max(-1), lambda x, y: x.maximum(y), dtypes.min)
_SCAN_MIN = _Scan(lambda r, m: m.where(r, dtypes.max(r.dtype)).min(-1), lambda x, y: x.minimum(y), dtypes.max)
_SCAN_LSE = _Scan(_lse_rows, lambda x, y: x.logaddexp(y), lambda dt: -math.inf)


def _float_input(x: Tensor, dtype: DTypeLike | None, op: str) -> Tensor:
    """x cast to `dtype` (which must be a float dtype), or to its own float dtype when None."""
    if dtype is None:
        return x.cast(least_upper_float(x.dtype))
    dt = to_dtype(dtype)
    if not dtypes.is_float(dt):
        raise TypeError(f"{op}: dtype must be a float dtype, got {dt}, expected e.g. dtypes.float32")
    return x.cast(dt)


def _masked_scan(x: Tensor, op: _Scan) -> Tensor:
    """Inclusive scan of the last axis as one reduction: out[..., i] = op over x[..., j] for j <= i."""
    n = x.shape[-1]
    rows = x.unsqueeze(-2).expand(*x.shape[:-1], n, n)  # rows[..., i, j] = x[..., j]
    j = type(x).arange(n, device=x.device)
    return op.block(rows, j.reshape(n, 1) >= j)


def _scan_last(x: Tensor, op: _Scan) -> Tensor:
    """Inclusive scan of the last axis: blocks scanned in place, plus the scan of the preceding block totals."""
    n = x.shape[-1]
    if n <= 2 * SCAN_BLOCK:
        return _masked_scan(x, op)
    blocks = math.ceil(n / SCAN_BLOCK)
    last_pad = [None] * (x.ndim - 1)
    padded = x.pad([*last_pad, (0, blocks * SCAN_BLOCK - n)], op.identity(x.dtype))
    inner = _scan_last(padded.reshape(*x.shape[:-1], blocks, SCAN_BLOCK), op)  # (..., blocks, B)
    totals = inner[..., -1]  # (..., blocks)
    before = _scan_last(totals, op).pad([*last_pad, (1, -1)], op.identity(x.dtype))  # exclusive: shift right by one
    out = op.combine(inner, before.unsqueeze(-1)).reshape(*x.shape[:-1], blocks * SCAN_BLOCK)
    return out.shrink([*last_pad, (0, n)])


def _scan(x: Tensor, axis: int, op: _Scan, name: str) -> Tensor:
    """Inclusive scan of `axis`; 0-d and empty tensors are returned as they are."""
    ax = x._axis(axis, name)
    if x.ndim == 0 or x.numel() == 0:
        return x
    return _scan_last(x.transpose(ax, -1), op).transpose(ax, -1)


def _positions(x: Tensor, axis: int) -> Tensor:
    """0..n-1 along `axis` (int32), shaped to broadcast against x."""
    n = x.shape[axis]
    return type(x).arange(n, device=x.device).reshape(n, *[1] * (x.ndim - axis - 1))


def _same(x: Tensor, y: Tensor) -> Tensor:
    """x == y, with NaN equal to NaN."""
    return (x == y) | (x.isnan() & y.isnan()) if dtypes.is_float(x.dtype) else x == y


def _first_index(x: Tensor, extreme: Tensor, axis: int, keepdim: bool) -> Tensor:
    """The first index along `axis` where x equals `extreme` (keepdim'd), as int32."""
    n = x.shape[axis]
    return _same(x, extreme).where(_positions(x, axis), n).min(axis, keepdim)


def _sorts_before(a: Tensor, ia: Tensor, b: Tensor, ib: Tensor, descending: bool) -> Tensor:
    """True where (a, ia) sorts before (b, ib): by value (NaN largest, -0.0 == 0.0), ties by index (stable)."""
    lo, hi = (b, a) if descending else (a, b)
    less = lo < hi
    if dtypes.is_float(a.dtype):
        less = less | (hi.isnan() & lo.isnan().logical_not())
    return less | (_same(a, b) & (ia < ib))


def _rank_sort(x: Tensor, descending: bool) -> tuple[Tensor, Tensor]:
    """Sort the last axis by counting, for every element, the elements that sort before it."""
    n = x.shape[-1]
    i = type(x).arange(n, device=x.device)
    # (..., i, j): does x_j sort before x_i?
    before = _sorts_before(x.unsqueeze(-2), i, x.unsqueeze(-1), i.reshape(n, 1), descending)
    rank = before.sum(-1, dtype=dtypes.int32)  # (..., n): where each element goes
    chosen = rank.unsqueeze(-2) == i.reshape(n, 1)  # (..., r, i): element i lands at position r
    values = chosen.where(x.unsqueeze(-2), dtypes.min(x.dtype)).max(-1)  # max keeps -0.0 (a sum would not)
    return values, chosen.where(i, 0).sum(-1, dtype=dtypes.int32)


def _halves(x: Tensor) -> tuple[Tensor, Tensor]:
    """Split axis -2 (of size 2) into its two entries."""
    keep = [None] * (x.ndim - 2)
    first = x.shrink([*keep, (0, 1), None]).squeeze(-2)
    return first, x.shrink([*keep, (1, 2), None]).squeeze(-2)


def _join(first: Tensor, second: Tensor) -> Tensor:
    """Stack two tensors along a new axis -2 (a where, not pad + add: that turns -0.0 into 0.0)."""
    is_first = type(first).arange(2, device=first.device).reshape(2, 1) == 0
    return is_first.where(first.unsqueeze(-2), second.unsqueeze(-2))


def _exchange(values: Tensor, idx: Tensor, n: int, descending: bool, mirror: bool) -> tuple[Tensor, Tensor]:
    """One bitonic step on (..., groups, 2, half): order each pair (first[k], second[k]), where second is read
    reversed when `mirror`. Indices >= n are padding and sort last."""
    (va, vb), (ia, ib) = _halves(values), _halves(idx)
    if mirror:
        vb, ib = vb.flip(-1), ib.flip(-1)
    swap = (ib < n) & ((ia >= n) | _sorts_before(vb, ib, va, ia, descending))
    lo_v, hi_v, lo_i, hi_i = swap.where(vb, va), swap.where(va, vb), swap.where(ib, ia), swap.where(ia, ib)
    if mirror:
        hi_v, hi_i = hi_v.flip(-1), hi_i.flip(-1)
    return _join(lo_v, hi_v).contiguous(), _join(lo_i, hi_i).contiguous()


def _bitonic_sort(x: Tensor, descending: bool) -> tuple[Tensor, Tensor]:
    """Sort the last axis with a bitonic network on (value, index) pairs, padded to a power of two."""
    n, batch = x.shape[-1], x.shape[:-1]
    size = 1 << (n - 1).bit_length()
    values = x.pad([*[None] * len(batch), (0, size - n)])
    idx = type(x).arange(size, device=x.device).expand(*batch, size)
    block = 2
    while block <= size:
        # merge sorted runs of block/2 into runs of `block`: mirror compare first, then half-cleaners
        span = block
        while span >= 2:
            shape = (*batch, size // span, 2, span // 2)
            values, idx = _exchange(values.reshape(shape), idx.reshape(shape), n, descending, span == block)
            values, idx = values.reshape(*batch, size), idx.reshape(*batch, size)
            span //= 2
        block *= 2
    keep = [*[None] * len(batch), (0, n)]
    return values.shrink(keep), idx.shrink(keep).cast(dtypes.int32)


class ReduceMixin:
    """Mixed into Tensor; see the module docstring."""

    __slots__ = ()

    # *** boolean reductions ***

    @traced
    def any(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
        """True where any element along `axis` (all axes when None) is nonzero; False for empty axes.

        Args:
            axis: an axis, a tuple of axes, or None for all.
            keepdim: keep the reduced axes with size 1.

        Returns:
            A bool tensor.

        Examples:
            >>> Tensor([[0, 1], [0, 0]]).any(1).tolist()
            [True, False]
        """
        return self.bool().max(axis, keepdim)

    @traced
    def all(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
        """True where every element along `axis` is nonzero; True for empty axes.

        Args:
            axis: an axis, a tuple of axes, or None for all.
            keepdim: keep the reduced axes with size 1.

        Returns:
            A bool tensor.

        Examples:
            >>> Tensor([[1, 1], [0, 1]]).all(1).tolist()
            [True, False]
        """
        return self.logical_not().any(axis, keepdim).logical_not()

    # *** arg reductions ***

    @traced
    def argmax(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """The index (int32) of the first maximum along `axis`, of the flattened tensor when None; NaN counts as the
        maximum.

        Args:
            axis: the axis to search (None: the flattened tensor).
            keepdim: keep the reduced axis with size 1.

        Returns:
            An int32 tensor of indices.

        Raises:
            ValueError: an empty axis.

        Examples:
            >>> Tensor([[1, 3, 3]]).argmax(1).tolist(), Tensor([[1, 3], [4, 0]]).argmax().item()
            ([1], 2)
        """
        return self._arg_extreme(axis, keepdim, "argmax")

    @traced
    def argmin(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """The index (int32) of the first minimum along `axis`, of the flattened tensor when None; NaN counts as the
        minimum.

        Args:
            axis: the axis to search (None: the flattened tensor).
            keepdim: keep the reduced axis with size 1.

        Returns:
            An int32 tensor of indices.

        Raises:
            ValueError: an empty axis.

        Examples:
            >>> Tensor([[2, 1, 1]]).argmin(1).tolist()
            [1]
        """
        return self._arg_extreme(axis, keepdim, "argmin")

    def _arg_extreme(self: Tensor, axis: int | None, keepdim: bool, name: str) -> Tensor:
        if axis is None:
            ret = self.flatten()._arg_extreme(0, False, name)
            return ret.reshape((1,) * self.ndim) if keepdim else ret
        ax = self._axis(axis, name)
        if self.ndim == 0:
            return self.full_like(0, dtype=dtypes.int32)
        if self.shape[ax] == 0:
            raise ValueError(f"{name}: cannot reduce axis {axis} of size 0 in shape {self.shape}")
        extreme = self.max(ax, keepdim=True) if name == "argmax" else self.min(ax, keepdim=True)
        return _first_index(self, extreme, ax, keepdim).cast(dtypes.int32)

    # *** products and normalisers ***

    @traced
    def prod(self: Tensor, axis: Axis = None, keepdim: bool = False, dtype: DTypeLike | None = None) -> Tensor:
        """Product along `axis` (all axes when None), in this dtype or cast to `dtype` first; 1 over empty axes.

        Args:
            axis: an axis, a tuple of axes, or None for all.
            keepdim: keep the reduced axes with size 1.
            dtype: the dtype to cast to first.

        Returns:
            The product.

        Examples:
            >>> Tensor([[1, 2], [3, 4]]).prod().item(), Tensor([[1, 2], [3, 4]]).prod(axis=1).tolist()
            (24, [2, 12])
        """
        # in self's dtype, like the reference (torch widens integers to int64)
        return (self if dtype is None else self.cast(dtype))._reduce(Ops.MUL, axis, keepdim, "prod")

    @traced
    def softmax(self: Tensor, axis: int = -1, dtype: DTypeLike | None = None) -> Tensor:
        """exp(x) / sum(exp(x)) along `axis`, shifted by the max; in `dtype` when given (a float dtype).

        Args:
            axis: the axis to normalise over.
            dtype: the dtype to compute in.

        Returns:
            Weights that sum to 1 along axis.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 0.6931472]).softmax().tolist()]  # e^0 : e^ln2 = 1 : 2
            [0.3333, 0.6667]
        """
        self._resolve_axes(axis, "softmax")
        x = _float_input(self, dtype, "softmax")
        # the shift cancels out: detached, no gradient flows through the max (its rounding error would reach the argmax)
        e = (x - x.max(axis, keepdim=True).detach()).exp()
        return e / e.sum(axis, keepdim=True)

    @traced
    def log_softmax(self: Tensor, axis: int = -1, dtype: DTypeLike | None = None) -> Tensor:
        """log(softmax(x)) along `axis` without underflow; in `dtype` when given (a float dtype).

        Args:
            axis: the axis to normalise over.
            dtype: the dtype to compute in.

        Returns:
            Log-probabilities along axis.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 0.0]).log_softmax().tolist()]
            [-0.6931, -0.6931]
        """
        self._resolve_axes(axis, "log_softmax")
        x = _float_input(self, dtype, "log_softmax")
        shifted = x - x.max(axis, keepdim=True).detach()  # the shift cancels out, as in softmax
        return shifted - shifted.exp().sum(axis, keepdim=True).log()

    # *** statistics ***

    @traced
    def var(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: float = 1) -> Tensor:
        """Variance sum((x - mean)^2) / max(N - correction, 0) along `axis`; float32 for integer inputs. NaN for one
        element with correction 1 (like torch).

        Args:
            axis: an axis, a tuple of axes, or None for all.
            keepdim: keep the reduced axes with size 1.
            correction: subtracted from the count (1: the unbiased sample variance, 0: the population's).

        Returns:
            The variance.

        Examples:
            >>> Tensor([1.0, 2.0, 3.0]).var().item(), Tensor([1.0, 2.0, 3.0]).var(correction=0).item()
            (1.0, 0.666...)
        """
        out_dt = self.dtype if dtypes.is_float(self.dtype) else dtypes.float32
        x = self.cast(least_upper_dtype(least_upper_float(self.dtype), dtypes.float32))  # float16 sums in float32
        axes = self._resolve_axes(axis, "var")
        count = math.prod(self.shape[a] for a in axes) if self.ndim else 1
        squares = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
        # a symbolic count (a UOp size) needs smax: Python's max would compare it, and a UOp comparison is truthy
        divisor = smax(count - correction, 0) if isinstance(count, UOp) else max(count - correction, 0)
        return (squares / divisor).cast(out_dt)

    @traced
    def std(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: float = 1) -> Tensor:
        """Standard deviation: sqrt of `var`; its gradient is 0 where every element is equal (as torch's), not the
        NaN of inf * 0 from sqrt at 0.

        Args:
            axis: an axis, a tuple of axes, or None for all.
            keepdim: keep the reduced axes with size 1.
            correction: subtracted from the count (1: unbiased).

        Returns:
            The standard deviation.

        Examples:
            >>> round(Tensor([1.0, 3.0]).std().item(), 4)
            1.4142
        """
        variance = self.var(axis, keepdim, correction)
        constant = variance == 0
        return constant.where(0, constant.where(1, variance).sqrt())

    @traced
    def var_mean(
        self: Tensor, axis: Axis = None, keepdim: bool = False, correction: float = 1
    ) -> tuple[Tensor, Tensor]:
        """(var, mean), like torch.var_mean.

        Args:
            axis: an axis, a tuple of axes, or None for all.
            keepdim: keep the reduced axes with size 1.
            correction: subtracted from the count (1: unbiased).

        Returns:
            (variance, mean).

        Examples:
            >>> [t.item() for t in Tensor([1.0, 2.0, 3.0]).var_mean()]
            [1.0, 2.0]
        """
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

    @traced
    def std_mean(
        self: Tensor, axis: Axis = None, keepdim: bool = False, correction: float = 1
    ) -> tuple[Tensor, Tensor]:
        """(std, mean), like torch.std_mean.

        Args:
            axis: an axis, a tuple of axes, or None for all.
            keepdim: keep the reduced axes with size 1.
            correction: subtracted from the count (1: unbiased).

        Returns:
            (standard deviation, mean).

        Examples:
            >>> [t.item() for t in Tensor([1.0, 2.0, 3.0]).std_mean()]
            [1.0, 2.0]
        """
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

    @traced
    def logsumexp(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
        """log(sum(exp(x))) along `axis` without overflow; -inf for empty axes.

        Args:
            axis: an axis, a tuple of axes, or None for all.
            keepdim: keep the reduced axes with size 1.

        Returns:
            The log of the sum of exponentials.

        Examples:
            >>> round(Tensor([0.0, 0.0]).logsumexp().item(), 4), Tensor([1000.0, 1000.0]).logsumexp().item() > 1000
            (0.6931, True)
        """
        axes = self._resolve_axes(axis, "logsumexp")
        x = self.cast(least_upper_dtype(least_upper_float(self.dtype), dtypes.float32))
        m = x.max(axis, keepdim=True).detach()
        m = m.isinf().where(0, m)  # an infinite max would give inf - inf = nan
        ret = ((x - m).exp().sum(axis, keepdim=True).log() + m).cast(least_upper_float(self.dtype))
        return ret if keepdim else ret.reshape(*[s for a, s in enumerate(self.shape) if a not in axes])

    @traced
    def softmin(self: Tensor, axis: int = -1, dtype: DTypeLike | None = None) -> Tensor:
        """softmax(-self) along `axis`, computed in `dtype` when given.

        Args:
            axis: the axis to normalise over.
            dtype: the dtype to compute in.

        Returns:
            Weights that sum to 1 along axis, the largest where self is smallest.

        Examples:
            >>> Tensor([0.0, 0.0]).softmin().tolist()
            [0.5, 0.5]
        """
        x = -self.cast(least_upper_float(self.dtype))
        return (x if dtype is None else x.cast(dtype)).softmax(axis)

    # *** cumulative ***

    @traced
    def cumsum(self: Tensor, axis: int = 0) -> Tensor:
        """Running sum along `axis`; integers and bools accumulate in at least int32, float16 in float32.

        Args:
            axis: the axis to accumulate along.

        Returns:
            A tensor of the same shape.

        Examples:
            >>> Tensor([1, 2, 3]).cumsum().tolist()
            [1, 3, 6]
        """
        out_dt = self.dtype if self.dtype in (dtypes.float16, dtypes.bfloat16) else sum_acc_dtype(self.dtype)
        return _scan(self.cast(sum_acc_dtype(self.dtype)), axis, _SCAN_ADD, "cumsum").cast(out_dt)

    @traced
    def cumprod(self: Tensor, axis: int) -> Tensor:
        """Running product along `axis`, in self's dtype.

        Args:
            axis: the axis to accumulate along.

        Returns:
            A tensor of the same shape.

        Examples:
            >>> Tensor([1, 2, 3]).cumprod(0).tolist()
            [1, 2, 6]
        """
        x = self.cast(sum_acc_dtype(self.dtype)) if dtypes.is_float(self.dtype) else self
        return _scan(x, axis, _SCAN_MUL, "cumprod").cast(self.dtype)

    @traced
    def cummax(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
        """(running max, int32 index of it) along `axis`; ties and NaNs take the latest index, like torch.

        Args:
            axis: the axis to accumulate along.

        Returns:
            (running maximum, its int32 index).

        Examples:
            >>> [t.tolist() for t in Tensor([1, 3, 2, 3]).cummax()]
            [[1, 3, 3, 3], [0, 1, 1, 3]]
        """
        return self._cumulative_extreme(axis, _SCAN_MAX, "cummax")

    @traced
    def cummin(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
        """(running min, int32 index of it) along `axis`; ties and NaNs take the latest index, like torch.

        Args:
            axis: the axis to accumulate along.

        Returns:
            (running minimum, its int32 index).

        Examples:
            >>> [t.tolist() for t in Tensor([3, 1, 2, 1]).cummin()]
            [[3, 1, 1, 1], [0, 1, 1, 3]]
        """
        return self._cumulative_extreme(axis, _SCAN_MIN, "cummin")

    def _cumulative_extreme(self: Tensor, axis: int, op: _Scan, name: str) -> tuple[Tensor, Tensor]:
        values = _scan(self, axis, op, name)
        if self.ndim == 0 or self.numel() == 0:
            return values, self.full_like(0, dtype=dtypes.int32)
        ax = self._axis(axis, name)
        # the running extreme at i was last set at the latest j <= i where x_j equals the running extreme at j
        is_record = _same(self, values)
        positions = is_record.where(_positions(self, ax), 0)
        indices = _scan(positions, ax, _SCAN_MAX, name).cast(dtypes.int32)
        if not dtypes.is_float(self.dtype):
            return values, indices
        # the values read back at the indices: the gradient goes to that one element (as torch's), not split over ties
        return self.gather(ax, indices), indices

    @traced
    def logcumsumexp(self: Tensor, axis: int = 0) -> Tensor:
        """log(cumsum(exp(x))) along `axis` without overflow or underflow.

        Args:
            axis: the axis to accumulate along.

        Returns:
            A tensor of the same shape.

        Examples:
            >>> [round(v, 4) for v in Tensor([0.0, 0.0]).logcumsumexp().tolist()]
            [0.0, 0.6931]
        """
        x = self.cast(least_upper_dtype(least_upper_float(self.dtype), dtypes.float32))
        return _scan(x, axis, _SCAN_LSE, "logcumsumexp").cast(least_upper_float(self.dtype))

    # *** sorting ***

    @traced
    def sort(self: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
        """(sorted values, int32 indices) along `dim`; stable (equal elements keep their order), NaN sorts as the
        largest value.

        Args:
            dim: the axis to sort.
            descending: largest first.

        Returns:
            (sorted values, their int32 indices in self).

        Examples:
            >>> [t.tolist() for t in Tensor([3, 1, 2]).sort()]
            [[1, 2, 3], [1, 2, 0]]
        """
        ax = self._axis(dim, "sort")
        if self.ndim == 0 or self.shape[ax] <= 1 or self.numel() == 0:
            return self, self.full_like(0, dtype=dtypes.int32)
        x = self.transpose(ax, -1)
        values, idx = (_rank_sort if x.shape[-1] <= RANK_SORT_MAX else _bitonic_sort)(x, descending)
        return values.transpose(ax, -1), idx.transpose(ax, -1)

    @traced
    def argsort(self: Tensor, dim: int = -1, descending: bool = False) -> Tensor:
        """The int32 indices that sort `dim` (stable).

        Args:
            dim: the axis to sort.
            descending: largest first.

        Returns:
            The indices, the same shape as self.

        Examples:
            >>> Tensor([3, 1, 2]).argsort().tolist(), Tensor([3, 1, 2]).argsort(descending=True).tolist()
            ([1, 2, 0], [0, 2, 1])
        """
        return self.sort(dim, descending)[1]

    @traced
    def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Tensor, Tensor]:
        """(the k largest (or smallest) values, their int32 indices) along `dim`, in sorted order (also when
        `sorted_` is False); equal values keep their order. Raises ValueError unless 0 <= k <= size of `dim`.

        Args:
            k: how many to keep.
            dim: the axis to search.
            largest: the largest values (False: the smallest).
            sorted_: accepted for compatibility; the result is always sorted.

        Returns:
            (values, int32 indices), each with k entries along dim.

        Raises:
            ValueError: k outside 0..size of dim.

        Examples:
            >>> [t.tolist() for t in Tensor([1, 3, 2]).topk(2)]
            [[3, 2], [1, 2]]
        """
        ax = self._axis(dim, "topk")
        size = self.shape[ax] if self.ndim else 1
        if not 0 <= k <= size:
            raise ValueError(f"topk: k={k} out of range for dim {dim} of size {size} (0..{size})")
        values, idx = self.sort(ax, descending=largest)
        if self.ndim == 0:
            return values, idx
        keep = [(0, k) if a == ax else None for a in range(self.ndim)]
        return values.shrink(keep), idx.shrink(keep)
