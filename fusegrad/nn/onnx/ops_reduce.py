"""ONNX reductions, scans, arg/top-k, Einsum and the loss ops, on fusegrad Tensors.

Reduce ops take their axes as an input (opset 18, ReduceSum from 13) or an attribute (older): both are accepted.
An absent or empty axes list reduces everything unless noop_with_empty_axes is set.
"""

from __future__ import annotations

from collections.abc import Callable

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.registry import normalize_axis, onnx_op, scalar, static_ints
from fusegrad.tensor import Tensor


def reduce_axes(x: Tensor, axes: Tensor | list[int] | None, noop_with_empty_axes: int) -> tuple[int, ...] | None:
    """The axes to reduce; None means "no reduction" (empty axes with noop_with_empty_axes)."""
    listed = static_ints(axes)
    if not listed:
        return None if noop_with_empty_axes else tuple(range(x.ndim))
    return tuple(normalize_axis(a, x.ndim) for a in listed)


def register_reduce(
    name: str, fn: Callable[[Tensor, tuple[int, ...], bool], Tensor], identity: Callable[[Tensor], Tensor]
) -> None:
    """Register Reduce<name>: fn(x, axes, keepdim); identity(x) is what an empty-axes no-op returns."""

    def reduce(
        x: Tensor,
        axes_input: Tensor | None = None,
        axes: list[int] | None = None,
        keepdims: int = 1,
        noop_with_empty_axes: int = 0,
    ) -> Tensor:
        chosen = reduce_axes(x, axes_input if axes_input is not None else axes, noop_with_empty_axes)
        if chosen is None:
            return identity(x)
        return fn(x, chosen, bool(keepdims))

    onnx_op(name)(reduce)


def _sum(x: Tensor, axes: tuple[int, ...], keepdim: bool) -> Tensor:
    return x.sum(axes, keepdim=keepdim, dtype=x.dtype)


def _prod(x: Tensor, axes: tuple[int, ...], keepdim: bool) -> Tensor:
    return x.prod(axes, keepdim=keepdim, dtype=x.dtype)


def _extreme(x: Tensor, axes: tuple[int, ...], keepdim: bool, largest: bool) -> Tensor:
    if any(x.shape[a] == 0 for a in axes):  # an empty reduction gives the identity: -inf for max, +inf for min
        shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape) if keepdim or i not in axes)
        fill = dtypes.min(x.dtype) if largest else dtypes.max(x.dtype)
        return Tensor.full(shape, fill, dtype=x.dtype)
    return x.max(axes, keepdim=keepdim) if largest else x.min(axes, keepdim=keepdim)


register_reduce("ReduceSum", _sum, lambda x: x)
register_reduce("ReduceProd", _prod, lambda x: x)
register_reduce("ReduceMean", lambda x, a, k: x.mean(a, keepdim=k), lambda x: x)
register_reduce("ReduceMax", lambda x, a, k: _extreme(x, a, k, True), lambda x: x)
register_reduce("ReduceMin", lambda x, a, k: _extreme(x, a, k, False), lambda x: x)
register_reduce("ReduceL1", lambda x, a, k: _sum(x.abs(), a, k), lambda x: x.abs())
register_reduce("ReduceL2", lambda x, a, k: _sum(x * x, a, k).sqrt(), lambda x: x.abs())
register_reduce("ReduceSumSquare", lambda x, a, k: _sum(x * x, a, k), lambda x: x * x)
register_reduce("ReduceLogSum", lambda x, a, k: _sum(x, a, k).log(), lambda x: x.log())
register_reduce("ReduceLogSumExp", lambda x, a, k: x.logsumexp(a, keepdim=k), lambda x: x)


# *** scans ***


def _scan(
    x: Tensor, axis: int, exclusive: int, reverse: int, step: Callable[[Tensor, int], Tensor], pad: float
) -> Tensor:
    """An inclusive scan step(x, axis), made exclusive by shifting in `pad` and reversed by flipping."""
    out = x.flip(axis) if reverse else x
    if exclusive:
        # drop the last element and shift one in from the front: (..., n) -> (..., 1 + n - 1)
        width = [(0, 0)] * x.ndim
        width[axis] = (1, 0)
        out = out.shrink([(0, s - 1) if i == axis else None for i, s in enumerate(out.shape)]).pad(width, value=pad)
    out = step(out, axis)
    return out.flip(axis) if reverse else out


@onnx_op("CumSum")
def cumsum(x: Tensor, axis: Tensor, exclusive: int = 0, reverse: int = 0) -> Tensor:
    return _scan(x, normalize_axis(scalar(axis), x.ndim), exclusive, reverse, Tensor.cumsum, 0).cast(x.dtype)


@onnx_op("CumProd")
def cumprod(x: Tensor, axis: Tensor, exclusive: int = 0, reverse: int = 0) -> Tensor:
    return _scan(x, normalize_axis(scalar(axis), x.ndim), exclusive, reverse, Tensor.cumprod, 1).cast(x.dtype)


# *** arg / top-k ***


def _arg(x: Tensor, axis: int, keepdims: int, select_last_index: int, largest: bool) -> Tensor:
    axis = normalize_axis(axis, x.ndim)
    source = x.flip(axis) if select_last_index else x
    index = source.argmax(axis, keepdim=bool(keepdims)) if largest else source.argmin(axis, keepdim=bool(keepdims))
    if select_last_index:  # an index into the flipped tensor counts from the end
        index = (x.shape[axis] - 1) - index
    return index.cast(dtypes.int64)


@onnx_op("ArgMax")
def argmax(x: Tensor, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Tensor:
    return _arg(x, axis, keepdims, select_last_index, True)


@onnx_op("ArgMin")
def argmin(x: Tensor, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Tensor:
    return _arg(x, axis, keepdims, select_last_index, False)


@onnx_op("TopK")
def topk(
    x: Tensor,
    k: Tensor,
    axis: int = -1,
    largest: int = 1,
    sorted: int = 1,  # noqa: A002  (ONNX's attribute name)
) -> tuple[Tensor, Tensor]:
    values, indices = x.topk(int(scalar(k)), dim=axis, largest=bool(largest), sorted_=bool(sorted))
    return values, indices.cast(dtypes.int64)


@onnx_op("Einsum")
def einsum(*xs: Tensor, equation: str) -> Tensor:
    return Tensor.einsum(equation, *xs)


# *** losses ***


def _reduce_loss(loss: Tensor, weights: Tensor | None, reduction: str) -> Tensor:
    """none / sum / mean of a per-element loss; a weighted mean divides by the weights' sum."""
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / (weights.sum() if weights is not None else loss.numel())


@onnx_op("NegativeLogLikelihoodLoss")
def nll_loss(
    x: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int | None = None, reduction: str = "mean"
) -> Tensor:
    # x (N, C, d1...) log-probabilities, target (N, d1...) class indices
    safe_target = target if ignore_index is None else (target == ignore_index).where(0, target)
    picked = -x.gather(1, safe_target.unsqueeze(1)).squeeze(1)
    weights = weight.gather(0, safe_target.reshape(-1)).reshape(target.shape) if weight is not None else None
    if ignore_index is not None:
        keep = (target != ignore_index).cast(x.dtype)
        weights = keep if weights is None else weights * keep
    loss = picked * weights if weights is not None else picked
    return _reduce_loss(loss, weights, reduction).cast(x.dtype)


@onnx_op("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy(
    scores: Tensor,
    labels: Tensor,
    weights: Tensor | None = None,
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> tuple[Tensor, Tensor]:
    log_prob = scores.log_softmax(1)
    return nll_loss(log_prob, labels, weights, ignore_index, reduction), log_prob


@onnx_op("Det")
def det(x: Tensor) -> Tensor:
    # Gaussian elimination with partial pivoting, unrolled over the columns of (..., n, n); a row swap flips the sign
    size = x.shape[-1]
    a = x.cast(dtypes.float64)
    sign = Tensor.ones(*x.shape[:-2], dtype=dtypes.float64)
    rows = Tensor.arange(size)
    for k in range(size):
        pivot = a[..., k:, k].abs().argmax(-1) + k  # (...)
        is_pivot = (rows == pivot.unsqueeze(-1)).cast(dtypes.float64).unsqueeze(-1)  # (..., n, 1)
        is_k = (rows == k).cast(dtypes.float64).unsqueeze(-1)
        row_pivot, row_k = (a * is_pivot).sum(-2, keepdim=True), a[..., k : k + 1, :]
        a = a + (is_k - is_pivot) * (row_pivot - row_k)  # swap rows k and pivot (nothing when they are the same)
        sign = (pivot != k).where(-sign, sign)
        below = (rows > k).cast(dtypes.float64).unsqueeze(-1)
        factors = below * a[..., :, k : k + 1] / a[..., k : k + 1, k : k + 1]
        a = a - factors * a[..., k : k + 1, :]
    diagonal = (a * Tensor.eye(size, dtype=dtypes.float64)).sum(-1)
    return (sign * diagonal.prod(-1)).cast(x.dtype)
