"""Index arithmetic for the movement and indexing methods (fusegrad/mixin/movement.py): internal helpers.

Tensor indices, gather and scatter become one-hot masks (the index compared with an IOTA) reduced over the indexed
axis; setitem undoes basic indexing with pads so a written value lands where `x[index]` reads from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fusegrad.dtype import ConstType, dtypes
from fusegrad.errors import OpTypeError, OpValueError
from fusegrad.helpers import prod

if TYPE_CHECKING:
    from fusegrad.tensor import Tensor


def narrow(x: Tensor, axis: int, start: int, end: int) -> Tensor:
    """x restricted to [start, end) along one axis."""
    return x.shrink([(start, end) if a == axis else None for a in range(x.ndim)])


def pad_axis(x: Tensor, axis: int, before: int, after: int) -> Tensor:
    """x padded with zeros along one axis."""
    return x.pad([(before, after) if a == axis else None for a in range(x.ndim)])


def broadcast_to(x: Tensor, shape: tuple[int, ...], op: str) -> Tensor:
    """numpy broadcasting of x to exactly `shape`."""
    if x.ndim > len(shape) or any(s not in (1, t) for s, t in zip(x.shape[::-1], shape[::-1], strict=False)):
        raise ValueError(f"{op}: cannot broadcast shape {x.shape} to {shape}")
    return x.reshape((1,) * (len(shape) - x.ndim) + x.shape).expand(shape)


def broadcast_shapes(shapes: Sequence[tuple[int, ...]], op: str) -> tuple[int, ...]:
    """numpy's broadcast shape of index shapes; IndexError (as numpy) when they do not broadcast."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(ndim):
        sizes = {s[axis - ndim + len(s)] for s in shapes if axis - ndim + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise IndexError(f"{op}: index shapes {' and '.join(map(str, shapes))} cannot be broadcast together")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def const_like(x: Tensor, value: ConstType) -> Tensor:
    """A 0-d constant of x's dtype and device (broadcasts without changing the dtype)."""
    return type(x).full((), value, dtype=x.dtype, device=x.device)


def pick(mask: Tensor, values: Tensor, axes: tuple[int, ...]) -> Tensor:
    """Sum of `values` where `mask` over `axes`, in values' dtype: with one hit per output this selects it.

    No axes (a 0-d index) reduce nothing.
    """
    selected = mask.where(values, const_like(values, 0))
    return selected.sum(axes).cast(values.dtype) if axes else selected


def iota(n: int, x: Tensor) -> Tensor:
    """0..n-1 (int32) on x's device."""
    return type(x).arange(n, device=x.device)


def invert(order: Sequence[int]) -> list[int]:
    """The permutation that undoes `order`."""
    inverse = [0] * len(order)
    for i, a in enumerate(order):
        inverse[a] = i
    return inverse


def scatter_mask(x: Tensor, dim: int, index: Tensor) -> tuple[Tensor, list[int]]:
    """One-hot of the index: (J_other..., J_dim, S) with S = x.shape[dim], and the axis order J_other + [dim]."""
    if not dtypes.is_int(index.dtype):
        raise TypeError(f"scatter: index must be an integer tensor, got {index.dtype}")
    if index.ndim != x.ndim or any(
        j > s for a, (j, s) in enumerate(zip(index.shape, x.shape, strict=True)) if a != dim
    ):
        raise OpValueError(f"scatter: index shape {index.shape} does not fit self {x.shape} outside dim {dim}")
    order = [a for a in range(x.ndim) if a != dim] + [dim]
    size = x.shape[dim]
    return index.permute(order).unsqueeze(-1) == iota(size, x).reshape((1,) * x.ndim + (size,)), order


def scatter_source(x: Tensor, index: Tensor, src: Tensor | ConstType, order: list[int]) -> Tensor:
    """src shrunk to the index's shape, in the mask's layout: (J_other..., J_dim, 1)."""
    cls = type(x)

    if not isinstance(src, cls):  # a constant; mypy does not narrow the union through type(x)
        return cls.full((1,) * (x.ndim + 1), src, dtype=x.dtype, device=x.device)  # type: ignore[arg-type]
    if src.dtype != x.dtype:
        raise OpTypeError(f"scatter: src dtype {src.dtype} does not match self's {x.dtype}")
    if src.ndim != index.ndim or any(j > s for j, s in zip(index.shape, src.shape, strict=True)):
        raise OpValueError(f"scatter: index shape {index.shape} does not fit src {src.shape}")
    return src.shrink([(0, j) for j in index.shape]).permute(order).unsqueeze(-1)


def scatter_back(x: Tensor, reduced: Tensor, order: list[int], fill: ConstType = 0) -> Tensor:
    """(J_other..., S) -> x's layout, padding J_other up to x's sizes with `fill` (those positions get no hits)."""
    grown = reduced.pad([(0, x.shape[a] - reduced.shape[i]) for i, a in enumerate(order)], value=fill)
    return grown.permute(invert(order))


def _as_index_tensor(x: Tensor, i: Any) -> Tensor:
    """A tensor, list, tuple or numpy array index as a tensor (an empty sequence is an empty int index)."""
    import numpy as np

    cls = type(x)

    if isinstance(i, cls):
        return i
    arr = np.asarray(i)
    if arr.size == 0:
        arr = arr.astype(np.int32)
    if arr.dtype != np.bool_ and not np.issubdtype(arr.dtype, np.integer):
        raise IndexError(f"getitem: index arrays must hold ints or bools, got {arr.dtype}")
    return cls(arr.astype(np.bool_ if arr.dtype == np.bool_ else np.int32), device=x.device)


def _expand_bool_masks(x: Tensor, entries: list[Any]) -> list[Any]:
    """Each boolean mask (covering mask.ndim axes) becomes one integer index per axis, as numpy's nonzero."""
    import numpy as np

    cls = type(x)

    arrays = (cls, list, tuple, np.ndarray)
    converted = [_as_index_tensor(x, i) if isinstance(i, arrays) else i for i in entries]
    real = sum(i.ndim if isinstance(i, cls) and i.dtype == dtypes.bool else 1 for i in converted if i is not None)
    out: list[Any] = []
    axis = 0  # the axis of x the next entry indexes
    for i in converted:
        if isinstance(i, cls) and i.dtype == dtypes.bool:
            covered = x.shape[axis : axis + i.ndim]
            if i.shape != covered:
                raise IndexError(
                    f"getitem: boolean index of shape {i.shape} does not match axes {axis}..{axis + i.ndim - 1} "
                    f"of shape {covered}"
                )
            out.extend(cls(np.asarray(nz, dtype=np.int32), device=x.device) for nz in np.nonzero(i.numpy()))
            axis += i.ndim
            continue
        if isinstance(i, cls) and not dtypes.is_int(i.dtype):
            raise IndexError(f"getitem: tensor indices must be integers or bools, got {i.dtype}")
        out.append(i)
        axis += x.ndim - real + 1 if i is Ellipsis else int(i is not None)
    return out


def _expand_entries(x: Tensor, entries: list[Any]) -> list[Any]:
    """Ellipsis and missing trailing axes become full slices (by identity: `==` on a tensor entry is elementwise)."""
    ellipses = [n for n, i in enumerate(entries) if i is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("getitem: an index can only have a single ellipsis")
    real = sum(1 for i in entries if i is not None and i is not Ellipsis)
    if real > x.ndim:
        raise IndexError(f"getitem: too many indices for {x.ndim}-d tensor: got {real}")
    fill = [slice(None)] * (x.ndim - real)
    return entries[: ellipses[0]] + fill + entries[ellipses[0] + 1 :] if ellipses else entries + fill


def split_index(x: Tensor, indices: Any) -> tuple[list[Any], list[tuple[int, Tensor]]]:
    """The basic part of an index (tensors replaced by full slices) and (axis of the basic view, tensor) pairs."""
    cls = type(x)

    entries = _expand_bool_masks(x, list(indices) if isinstance(indices, tuple) else [indices])
    basic: list[Any] = []
    tensors: list[tuple[int, Tensor]] = []
    position = 0  # axis of the basic view that the next entry produces
    for i in _expand_entries(x, entries):
        if isinstance(i, cls):
            tensors.append((position, i))
            i = slice(None)
        basic.append(i)
        position += 0 if isinstance(i, int) else 1
    return basic, tensors


def index_masks(view: Tensor, tensors: list[tuple[int, Tensor]]) -> tuple[Tensor, tuple[int, ...], list[int]]:
    """The joint one-hot of broadcast index tensors over the indexed axes of `view`.

    Returns (mask of shape (B..., 1 per other axis..., S_1..S_k), B, the other axes of view in order).
    """
    positions = [p for p, _ in tensors]
    rest = [a for a in range(view.ndim) if a not in positions]
    batch = broadcast_shapes([t.shape for _, t in tensors], "getitem")
    k, lead = len(tensors), len(batch) + len(rest)
    mask: Tensor | None = None
    for n, (p, t) in enumerate(tensors):
        size = view.shape[p]
        wrapped = (t < 0).where(t + size, t)  # negative indices count from the end, as in numpy
        column = broadcast_to(wrapped, batch, "getitem").reshape(batch + (1,) * (len(rest) + k))
        row = iota(size, view).reshape((1,) * (lead + n) + (size,) + (1,) * (k - n - 1))
        mask = column == row if mask is None else mask & (column == row)
    assert mask is not None, "getitem: advanced indexing needs at least one tensor index"
    return mask, batch, rest


def _batch_position(tensors: list[tuple[int, Tensor]]) -> int:
    """Where the broadcast index axes go: the first indexed axis when they are adjacent, else the front."""
    positions = [p for p, _ in tensors]
    return positions[0] if positions == list(range(positions[0], positions[0] + len(positions))) else 0


def _placed_shape(batch: tuple[int, ...], rest: tuple[int, ...], tensors: list[tuple[int, Tensor]]) -> tuple[int, ...]:
    """The shape of `view[tensors]`: batch axes placed among the rest."""
    first = _batch_position(tensors)
    return rest[:first] + batch + rest[first:]


def place_batch(out: Tensor, batch_ndim: int, tensors: list[tuple[int, Tensor]]) -> Tensor:
    """(B..., rest...) -> the result's layout (numpy's rule, see _batch_position)."""
    first = _batch_position(tensors)
    rest = list(range(batch_ndim, out.ndim))
    return out.permute(*rest[:first], *range(batch_ndim), *rest[first:]) if first else out


def _unplace_batch(value: Tensor, batch_ndim: int, tensors: list[tuple[int, Tensor]]) -> Tensor:
    """The inverse of place_batch: the result's layout -> (B..., rest...)."""
    first = _batch_position(tensors)
    batch = list(range(first, first + batch_ndim))
    return value.permute(*batch, *[a for a in range(value.ndim) if a not in batch]) if first else value


def unindex_basic(y: Tensor, basic: list[Any], shape: tuple[int, ...]) -> Tensor:
    """Put y (shaped like x[basic]) back where x[basic] reads from, in an x-shaped tensor (zeros elsewhere)."""
    axis, out_axis = 0, 0  # next axis of x, next axis of y
    for i in basic:
        if i is None:
            y = y.reshape(*y.shape[:out_axis], *y.shape[out_axis + 1 :])
            continue
        size = shape[axis]
        if isinstance(i, int):
            y, start = y.unsqueeze(out_axis), i % size
            y = pad_axis(y, out_axis, start, size - start - 1)
        else:
            y = _spread_slice(y, out_axis, i, size)
        axis, out_axis = axis + 1, out_axis + 1
    return y


def _spread_slice(y: Tensor, axis: int, sl: slice, size: int) -> Tensor:
    """Undo `x[sl]` along one axis: flip back, interleave step-1 zeros, pad to `size`."""
    start, stop, step = sl.indices(size)
    m = len(range(start, stop, step))
    if m == 0:
        return pad_axis(y, axis, 0, size)
    low = start if step > 0 else start + (m - 1) * step
    if step < 0:
        y = y.flip(axis)
    stride = abs(step)
    if stride > 1:
        y = y.reshape(*y.shape[: axis + 1], 1, *y.shape[axis + 1 :])
        y = pad_axis(y, axis + 1, 0, stride - 1).reshape(*y.shape[:axis], m * stride, *y.shape[axis + 2 :])
        y = narrow(y, axis, 0, (m - 1) * stride + 1)
    return pad_axis(y, axis, low, size - low - y.shape[axis])


def has_unit_steps(indices: Any) -> bool:
    """No slice steps other than +-1: the view is pad-free, so it can be assigned into."""
    entries = indices if isinstance(indices, tuple) else (indices,)
    return all(not isinstance(i, slice) or i.step in (None, 1, -1) for i in entries)


def put_tensor_indexed(view: Tensor, tensors: list[tuple[int, Tensor]], value: Tensor) -> tuple[Tensor, Tensor]:
    """(new values, hit mask) in view's shape for `view[tensors] = value`: a one-hot reduction over the batch."""
    mask, batch, rest = index_masks(view, tensors)  # (B..., 1 per rest axis..., S...)
    positions, nb = [p for p, _ in tensors], len(batch)
    shape = tuple(view.shape[a] for a in rest) + tuple(view.shape[p] for p in positions)  # (rest..., S...)
    v = _unplace_batch(broadcast_to(value, _placed_shape(batch, shape[: len(rest)], tensors), "setitem"), nb, tensors)
    batch_axes = tuple(range(nb))
    if nb:
        number = iota(prod(batch), view).reshape(batch + (1,) * (mask.ndim - nb))  # each batch element's number
        last = mask.where(number, -1).max(batch_axes, keepdim=True)
        mask = mask & (number == last)  # duplicate indices: the last write wins, as in numpy
    new = pick(mask, v.reshape(v.shape + (1,) * len(positions)), batch_axes)
    hit = mask.cast(dtypes.int32).sum(batch_axes) > 0 if nb else mask
    inverse = invert(rest + positions)
    return broadcast_to(new, shape, "setitem").permute(inverse), broadcast_to(hit, shape, "setitem").permute(inverse)
