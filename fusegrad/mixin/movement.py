# mixin methods annotate `self: Tensor`, a subclass, where mypy wants a supertype of the mixin ([misc])
# mypy: disable-error-code="misc"
"""Tensor methods: movement and indexing beyond the core (cat, stack, split, pad modes, gather, scatter, setitem).

Everything is built from the core's movement ops (reshape, permute, expand, pad, shrink, flip) and elementwise ops.
Data-dependent selection (gather, scatter, tensor indices) compares the index with an IOTA (a one-hot mask) and
reduces over the indexed axis, so it fuses like any other reduction; only boolean masks and `masked_select` without
`size` realize a value on the host, because their result's shape depends on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from fusegrad.dtype import ConstType, DTypeLike, dtypes, least_upper_dtype, to_dtype
from fusegrad.helpers import argfix, ceildiv, prod
from fusegrad.uop import Ops

if TYPE_CHECKING:
    from fusegrad.tensor import Tensor

PadMode = Literal["constant", "reflect", "replicate", "circular"]


# *** small helpers ***


def _narrow(x: Tensor, axis: int, start: int, end: int) -> Tensor:
    """x restricted to [start, end) along one axis."""
    return x.shrink([(start, end) if a == axis else None for a in range(x.ndim)])


def _pad_axis(x: Tensor, axis: int, before: int, after: int) -> Tensor:
    return x.pad([(before, after) if a == axis else None for a in range(x.ndim)])


def _broadcast_to(x: Tensor, shape: tuple[int, ...], op: str) -> Tensor:
    """numpy broadcasting of x to exactly `shape`."""
    if x.ndim > len(shape) or any(s not in (1, t) for s, t in zip(x.shape[::-1], shape[::-1], strict=False)):
        raise ValueError(f"{op}: cannot broadcast shape {x.shape} to {shape}")
    return x.reshape((1,) * (len(shape) - x.ndim) + x.shape).expand(shape)


def _broadcast_shapes(shapes: Sequence[tuple[int, ...]], op: str) -> tuple[int, ...]:
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(ndim):
        sizes = {s[axis - ndim + len(s)] for s in shapes if axis - ndim + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise IndexError(f"{op}: index shapes {' and '.join(map(str, shapes))} cannot be broadcast together")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _const(x: Tensor, value: ConstType) -> Tensor:
    """A 0-d constant of x's dtype and device (broadcasts without changing the dtype)."""
    from fusegrad.tensor import Tensor

    return Tensor.full((), value, dtype=x.dtype, device=x.device)


def _pick(mask: Tensor, values: Tensor, axes: tuple[int, ...]) -> Tensor:
    """Sum of `values` where `mask` over `axes`, in values' dtype: with one hit per output this selects it."""
    return mask.where(values, _const(values, 0)).sum(axes).cast(values.dtype)


def _iota(n: int, x: Tensor) -> Tensor:
    from fusegrad.tensor import Tensor

    return Tensor.arange(n, device=x.device)


def _invert(order: Sequence[int]) -> list[int]:
    inverse = [0] * len(order)
    for i, a in enumerate(order):
        inverse[a] = i
    return inverse


# *** padding ***


def _padding_pairs(x: Tensor, padding: Sequence[Any]) -> list[tuple[int, int]]:
    """torch-style flat (last axis first) or per-axis (before, after) padding -> one pair per axis."""
    items = list(padding)
    if all(isinstance(p, int) for p in items):
        if len(items) % 2 or len(items) > 2 * x.ndim:
            raise ValueError(
                f"pad: flat padding needs an even length of at most {2 * x.ndim} for shape {x.shape}, got {len(items)}"
            )
        pairs = [(0, 0)] * x.ndim
        for k in range(len(items) // 2):
            pairs[x.ndim - 1 - k] = (items[2 * k], items[2 * k + 1])
        return pairs
    if len(items) != x.ndim:
        raise ValueError(f"pad: expected {x.ndim} (before, after) pairs for shape {x.shape}, got {len(items)}")
    return [(0, 0) if p is None else (int(p[0]), int(p[1])) for p in items]


def _reflect(x: Tensor, axis: int, before: int, after: int) -> Tensor:
    """Mirror without repeating the edge: [1 2 3] padded (2, 1) -> [3 2 1 2 3 2]."""
    size = x.shape[axis]
    if before >= size or after >= size:
        raise ValueError(f"pad: reflect padding ({before}, {after}) must be smaller than axis {axis} of size {size}")
    left = _narrow(x, axis, 1, before + 1).flip(axis)
    right = _narrow(x, axis, size - 1 - after, size - 1).flip(axis)
    return left.cat(x, right, dim=axis)


def _replicate(x: Tensor, axis: int, before: int, after: int) -> Tensor:
    """Repeat the edge values: [1 2 3] padded (2, 1) -> [1 1 1 2 3 3]."""
    size = x.shape[axis]
    if size == 0:
        raise ValueError(f"pad: replicate padding needs a non-empty axis {axis}, got shape {x.shape}")
    grow = [s if a != axis else None for a, s in enumerate(x.shape)]
    left = _narrow(x, axis, 0, 1).expand(*[before if s is None else s for s in grow])
    right = _narrow(x, axis, size - 1, size).expand(*[after if s is None else s for s in grow])
    return left.cat(x, right, dim=axis)


def _circular(x: Tensor, axis: int, before: int, after: int) -> Tensor:
    """Wrap around: [1 2 3] padded (2, 1) -> [2 3 1 2 3 1]."""
    size = x.shape[axis]
    if before > size or after > size:
        raise ValueError(
            f"pad: circular padding ({before}, {after}) wraps around more than once on axis {axis} of size {size}"
        )
    return _narrow(x, axis, size - before, size).cat(x, _narrow(x, axis, 0, after), dim=axis)


_PAD_MODES = {"reflect": _reflect, "replicate": _replicate, "circular": _circular}


# *** scatter layout: (index axes except dim..., index axis dim, self axis dim) ***


def _scatter_mask(x: Tensor, dim: int, index: Tensor) -> tuple[Tensor, list[int]]:
    """One-hot of the index: (J_other..., J_dim, S) with S = x.shape[dim], and the axis order J_other + [dim]."""
    if not dtypes.is_int(index.dtype):
        raise TypeError(f"scatter: index must be an integer tensor, got {index.dtype}")
    if index.ndim != x.ndim or any(
        j > s for a, (j, s) in enumerate(zip(index.shape, x.shape, strict=True)) if a != dim
    ):
        raise ValueError(f"scatter: index shape {index.shape} does not fit self {x.shape} outside dim {dim}")
    order = [a for a in range(x.ndim) if a != dim] + [dim]
    size = x.shape[dim]
    return index.permute(order).unsqueeze(-1) == _iota(size, x).reshape((1,) * x.ndim + (size,)), order


def _scatter_source(x: Tensor, index: Tensor, src: Tensor | ConstType, order: list[int]) -> Tensor:
    """src shrunk to the index's shape, in the mask's layout: (J_other..., J_dim, 1)."""
    from fusegrad.tensor import Tensor

    if not isinstance(src, Tensor):
        return Tensor.full((1,) * (x.ndim + 1), src, dtype=x.dtype, device=x.device)
    if src.dtype != x.dtype:
        raise TypeError(f"scatter: src dtype {src.dtype} does not match self's {x.dtype}")
    if src.ndim != index.ndim or any(j > s for j, s in zip(index.shape, src.shape, strict=True)):
        raise ValueError(f"scatter: index shape {index.shape} does not fit src {src.shape}")
    return src.shrink([(0, j) for j in index.shape]).permute(order).unsqueeze(-1)


def _scatter_back(x: Tensor, reduced: Tensor, order: list[int], fill: ConstType = 0) -> Tensor:
    """(J_other..., S) -> x's layout, padding J_other up to x's sizes with `fill` (those positions get no hits)."""
    grown = reduced.pad([(0, x.shape[a] - reduced.shape[i]) for i, a in enumerate(order)], value=fill)
    return grown.permute(_invert(order))


# *** advanced indexing ***


def _as_index_tensor(x: Tensor, i: Any) -> Tensor:
    """A tensor, list, tuple or numpy array index as a tensor (an empty sequence is an empty int index)."""
    import numpy as np

    from fusegrad.tensor import Tensor

    if isinstance(i, Tensor):
        return i
    arr = np.asarray(i)
    if arr.size == 0:
        arr = arr.astype(np.int32)
    if arr.dtype != np.bool_ and not np.issubdtype(arr.dtype, np.integer):
        raise IndexError(f"getitem: index arrays must hold ints or bools, got {arr.dtype}")
    return Tensor(arr.astype(np.bool_ if arr.dtype == np.bool_ else np.int32), device=x.device)


def _expand_bool_masks(x: Tensor, entries: list[Any]) -> list[Any]:
    """Each boolean mask (covering mask.ndim axes) becomes one integer index per axis, as numpy's nonzero."""
    import numpy as np

    from fusegrad.tensor import Tensor

    arrays = (Tensor, list, tuple, np.ndarray)
    converted = [_as_index_tensor(x, i) if isinstance(i, arrays) else i for i in entries]
    real = sum(i.ndim if isinstance(i, Tensor) and i.dtype == dtypes.bool else 1 for i in converted if i is not None)
    out: list[Any] = []
    axis = 0  # the axis of x the next entry indexes
    for i in converted:
        if isinstance(i, Tensor) and i.dtype == dtypes.bool:
            covered = x.shape[axis : axis + i.ndim]
            if i.shape != covered:
                raise IndexError(
                    f"getitem: boolean index of shape {i.shape} does not match axes {axis}..{axis + i.ndim - 1} "
                    f"of shape {covered}"
                )
            out.extend(Tensor(np.asarray(nz, dtype=np.int32), device=x.device) for nz in np.nonzero(i.numpy()))
            axis += i.ndim
            continue
        if isinstance(i, Tensor) and not dtypes.is_int(i.dtype):
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


def _split_index(x: Tensor, indices: Any) -> tuple[list[Any], list[tuple[int, Tensor]]]:
    """The basic part of an index (tensors replaced by full slices) and (axis of the basic view, tensor) pairs."""
    from fusegrad.tensor import Tensor

    entries = _expand_bool_masks(x, list(indices) if isinstance(indices, tuple) else [indices])
    basic: list[Any] = []
    tensors: list[tuple[int, Tensor]] = []
    position = 0  # axis of the basic view that the next entry produces
    for i in _expand_entries(x, entries):
        if isinstance(i, Tensor):
            tensors.append((position, i))
            i = slice(None)
        basic.append(i)
        position += 0 if isinstance(i, int) else 1
    return basic, tensors


def _index_masks(view: Tensor, tensors: list[tuple[int, Tensor]]) -> tuple[Tensor, tuple[int, ...], list[int]]:
    """The joint one-hot of broadcast index tensors over the indexed axes of `view`.

    Returns (mask of shape (B..., 1 per other axis..., S_1..S_k), B, the other axes of view in order).
    """
    positions = [p for p, _ in tensors]
    rest = [a for a in range(view.ndim) if a not in positions]
    batch = _broadcast_shapes([t.shape for _, t in tensors], "getitem")
    k, lead = len(tensors), len(batch) + len(rest)
    mask: Tensor | None = None
    for n, (p, t) in enumerate(tensors):
        size = view.shape[p]
        wrapped = (t < 0).where(t + size, t)  # negative indices count from the end, as in numpy
        column = _broadcast_to(wrapped, batch, "getitem").reshape(batch + (1,) * (len(rest) + k))
        row = _iota(size, view).reshape((1,) * (lead + n) + (size,) + (1,) * (k - n - 1))
        mask = column == row if mask is None else mask & (column == row)
    assert mask is not None, "getitem: advanced indexing needs at least one tensor index"
    return mask, batch, rest


def _batch_position(tensors: list[tuple[int, Tensor]]) -> int:
    """Where the broadcast index axes go: the first indexed axis when they are adjacent, else the front."""
    positions = [p for p, _ in tensors]
    return positions[0] if positions == list(range(positions[0], positions[0] + len(positions))) else 0


def _placed_shape(batch: tuple[int, ...], rest: tuple[int, ...], tensors: list[tuple[int, Tensor]]) -> tuple[int, ...]:
    first = _batch_position(tensors)
    return rest[:first] + batch + rest[first:]


def _place_batch(out: Tensor, batch_ndim: int, tensors: list[tuple[int, Tensor]]) -> Tensor:
    """(B..., rest...) -> the result's layout (numpy's rule, see _batch_position)."""
    first = _batch_position(tensors)
    rest = list(range(batch_ndim, out.ndim))
    return out.permute(*rest[:first], *range(batch_ndim), *rest[first:]) if first else out


def _unplace_batch(value: Tensor, batch_ndim: int, tensors: list[tuple[int, Tensor]]) -> Tensor:
    """The inverse of _place_batch: the result's layout -> (B..., rest...)."""
    first = _batch_position(tensors)
    batch = list(range(first, first + batch_ndim))
    return value.permute(*batch, *[a for a in range(value.ndim) if a not in batch]) if first else value


def _unindex_basic(y: Tensor, basic: list[Any], shape: tuple[int, ...]) -> Tensor:
    """Put y (shaped like x[basic]) back where x[basic] reads from, in an x-shaped tensor (zeros elsewhere)."""
    axis, out_axis = 0, 0  # next axis of x, next axis of y
    for i in basic:
        if i is None:
            y = y.reshape(*y.shape[:out_axis], *y.shape[out_axis + 1 :])
            continue
        size = shape[axis]
        if isinstance(i, int):
            y, start = y.unsqueeze(out_axis), i % size
            y = _pad_axis(y, out_axis, start, size - start - 1)
        else:
            y = _spread_slice(y, out_axis, i, size)
        axis, out_axis = axis + 1, out_axis + 1
    return y


def _spread_slice(y: Tensor, axis: int, sl: slice, size: int) -> Tensor:
    """Undo `x[sl]` along one axis: flip back, interleave step-1 zeros, pad to `size`."""
    start, stop, step = sl.indices(size)
    m = len(range(start, stop, step))
    if m == 0:
        return _pad_axis(y, axis, 0, size)
    low = start if step > 0 else start + (m - 1) * step
    if step < 0:
        y = y.flip(axis)
    stride = abs(step)
    if stride > 1:
        y = y.reshape(*y.shape[: axis + 1], 1, *y.shape[axis + 1 :])
        y = _pad_axis(y, axis + 1, 0, stride - 1).reshape(*y.shape[:axis], m * stride, *y.shape[axis + 2 :])
        y = _narrow(y, axis, 0, (m - 1) * stride + 1)
    return _pad_axis(y, axis, low, size - low - y.shape[axis])


class MovementMixin:
    """Mixed into Tensor; see the module docstring."""

    __slots__ = ()

    # *** tiling and padding ***

    def repeat(self: Tensor, repeats: Any, *args: int) -> Tensor:
        """Tile along each axis: (2, 3).repeat(2, 1, 2) -> (2, 4, 6). Leading repeats add axes."""
        reps = tuple(argfix(repeats, *args))
        if len(reps) < self.ndim or any(r < 0 for r in reps):
            raise ValueError(
                f"repeat: need {self.ndim} or more non-negative repeats for shape {self.shape}, got {reps}"
            )
        shape = (1,) * (len(reps) - self.ndim) + self.shape
        x = self.reshape(*[d for s in shape for d in (1, s)])  # (1, s0, 1, s1, ...)
        x = x.expand(*[d for r, s in zip(reps, shape, strict=True) for d in (r, s)])  # (r0, s0, r1, s1, ...)
        return x.reshape(*[r * s for r, s in zip(reps, shape, strict=True)])

    def repeat_interleave(self: Tensor, repeats: int, dim: int | None = None) -> Tensor:
        """Repeat each element `repeats` times along dim (flattened first when dim is None): [1 2] -> [1 1 2 2]."""
        if not isinstance(repeats, int) or repeats < 0:
            raise ValueError(f"repeat_interleave: repeats must be a non-negative int, got {repeats!r}")
        x = self.flatten() if dim is None else self
        d = x._axis(0 if dim is None else dim, "repeat_interleave")
        s = x.shape
        x = x.reshape(*s[: d + 1], 1, *s[d + 1 :]).expand(*s[: d + 1], repeats, *s[d + 1 :])
        return x.reshape(*s[:d], s[d] * repeats, *s[d + 1 :])

    def pad_to(self: Tensor, shape: Any, *args: int | None, value: ConstType = 0) -> Tensor:
        """Pad at the end of each axis up to `shape` (None keeps an axis). Raises ValueError when shrinking."""
        target = tuple(argfix(shape, *args))
        if len(target) != self.ndim or any(t is not None and t < s for t, s in zip(target, self.shape, strict=True)):
            raise ValueError(f"pad_to: cannot pad shape {self.shape} to {target}")
        return self.pad(
            [None if t is None else (0, t - s) for t, s in zip(target, self.shape, strict=True)], value=value
        )

    def _pad_mode(self: Tensor, padding: Sequence[Any], mode: str = "constant", value: ConstType = 0.0) -> Tensor:
        """`pad` with torch-style flat padding and the modes constant, reflect, replicate and circular.

        Negative pads shrink. reflect/replicate pad the input first and then shrink (as torch); circular shrinks
        first. Example: `Tensor([1, 2, 3]).pad((2, 1), mode="reflect").tolist() == [3, 2, 1, 2, 3, 2]`.
        """
        pairs = _padding_pairs(self, padding)
        if mode == "constant":
            return self.pad(pairs, value=value)
        if mode not in _PAD_MODES:
            raise ValueError(f"pad: mode {mode!r} is not supported: expected constant, reflect, replicate or circular")
        if value != 0:
            raise ValueError(f"pad: value={value} only applies to mode 'constant', got mode {mode!r}")
        x = self
        for axis, (before, after) in enumerate(pairs):
            if mode == "circular":
                x = _narrow(x, axis, max(0, -before), x.shape[axis] - max(0, -after))
            if before > 0 or after > 0:
                x = _PAD_MODES[mode](x, axis, max(0, before), max(0, after))
            if mode != "circular":
                x = _narrow(x, axis, max(0, -before), x.shape[axis] - max(0, -after))
        return x

    def roll(self: Tensor, shifts: int | tuple[int, ...], dims: int | tuple[int, ...] | None = None) -> Tensor:
        """Shift elements circularly along dims (the flattened tensor when None): [1 2 3].roll(1) -> [3 1 2]."""
        if dims is None:
            if not isinstance(shifts, int):
                raise ValueError(f"roll: without dims, shifts must be one int, got {shifts}")
            return self.flatten().roll(shifts, 0).reshape(self.shape)
        shift_list = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        dim_list = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(shift_list) != len(dim_list):
            raise ValueError(f"roll: {len(shift_list)} shifts for {len(dim_list)} dims")
        x = self
        for shift, dim in zip(shift_list, dim_list, strict=True):
            d = x._axis(dim, "roll")
            size = x.shape[d]
            if size and shift % size:
                k = shift % size
                x = _narrow(x, d, size - k, size).cat(_narrow(x, d, 0, size - k), dim=d)
        return x

    # *** joining and splitting ***

    def cat(self: Tensor, *args: Tensor, dim: int = 0) -> Tensor:
        """Join tensors along an existing axis; dtypes promote. (2, 3).cat((4, 3)) -> (6, 3)."""
        from fusegrad.tensor import Tensor

        tensors = [self, *args]
        if not all(isinstance(t, Tensor) for t in tensors):
            raise TypeError(f"cat: expected Tensors, got {[type(t).__name__ for t in tensors]}")
        if self.ndim == 0:
            raise ValueError("cat: zero-dimensional tensors cannot be concatenated")
        d = self._axis(dim, "cat")
        for t in args:
            if t.ndim != self.ndim or any(
                a != b for i, (a, b) in enumerate(zip(t.shape, self.shape, strict=True)) if i != d
            ):
                shapes = " and ".join(str(u.shape) for u in tensors)
                raise ValueError(f"cat: shapes {shapes} differ outside dim {d}")
            if t.device != self.device:
                raise ValueError(f"cat: tensors on different devices {self.device} and {t.device}; use .to() first")
        dt = least_upper_dtype(*(t.dtype for t in tensors))
        sizes = [t.shape[d] for t in tensors]
        total, offset, out = sum(sizes), 0, None
        for t, size in zip(tensors, sizes, strict=True):
            placed = _pad_axis(t.cast(dt), d, offset, total - offset - size)
            if out is None:
                out = placed
            elif size:  # where, not add: keeps -0.0 and works for bool
                region = Tensor.full(t.shape, True, dtype=dtypes.bool, device=t.device)
                out = _pad_axis(region, d, offset, total - offset - size).where(placed, out)
            offset += size
        assert out is not None, "cat: at least self is joined"
        return out

    def stack(self: Tensor, *args: Tensor, dim: int = 0) -> Tensor:
        """Join equal-shaped tensors along a new axis: three (2, 3) tensors stacked at dim 1 -> (2, 3, 3)."""
        for t in args:
            if t.shape != self.shape:
                raise ValueError(f"stack: all tensors need the same shape: got {self.shape} and {t.shape}")
        if not -self.ndim - 1 <= dim <= self.ndim:
            raise IndexError(
                f"stack: dim {dim} out of range for {self.ndim + 1}-d result ({-self.ndim - 1}..{self.ndim})"
            )
        d = dim % (self.ndim + 1)
        return self.unsqueeze(d).cat(*[t.unsqueeze(d) for t in args], dim=d)

    def split(self: Tensor, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """Pieces of `sizes` elements along dim (an int: equal pieces, the last may be smaller)."""
        d = self._axis(dim, "split")
        size = self.shape[d]
        if isinstance(sizes, int):
            if sizes <= 0:
                raise ValueError(f"split: split size must be positive, got {sizes}")
            sizes = [min(sizes, size - i) for i in range(0, max(1, size), sizes)]
        if sum(sizes) != size or any(s < 0 for s in sizes):
            raise ValueError(f"split: sizes {list(sizes)} must be non-negative and sum to {size} (dim {d})")
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        return tuple(_narrow(self, d, s, s + n) for s, n in zip(starts, sizes, strict=True))

    def chunk(self: Tensor, chunks: int, dim: int = 0) -> list[Tensor]:
        """At most `chunks` pieces of ceil(size / chunks) elements along dim (the last may be smaller)."""
        if chunks <= 0:
            raise ValueError(f"chunk: number of chunks must be positive, got {chunks}")
        d = self._axis(dim, "chunk")
        size = self.shape[d]
        return list(self.split(ceildiv(size, chunks), d)) if size else [self] * chunks

    def unfold(self: Tensor, dim: int, size: int, step: int) -> Tensor:
        """Sliding windows: dim becomes (size - window) // step + 1 windows and a new last axis holds each window."""
        if self.ndim == 0:
            raise ValueError("unfold: needs at least a 1-d tensor")
        d = self._axis(dim, "unfold")
        n = self.shape[d]
        if not 0 <= size <= n or step <= 0:
            raise ValueError(f"unfold: need 0 <= size <= {n} and step > 0 on dim {d}, got size={size}, step={step}")
        others = [a for a in range(self.ndim) if a != d]
        x = self.permute(*others, d)  # (..., n)
        lead = x.shape[:-1]
        # tile `size` copies, pad each row by one: row k of (size, n + 1) then starts at x[k] (windows on the diagonal)
        x = x.unsqueeze(-2).expand(*lead, size, n).reshape(*lead, size * n)
        x = _pad_axis(x, x.ndim - 1, 0, size).reshape(*lead, size, n + 1)  # [..., k, i] = x[i + k]
        x = _narrow(x, x.ndim - 1, 0, n - size + 1)[..., ::step]  # (..., size, windows)
        return x.permute(*range(d), x.ndim - 1, *range(d, x.ndim - 2), x.ndim - 2)

    def unflatten(self: Tensor, dim: int, sizes: tuple[int, ...]) -> Tensor:
        """Split one axis into `sizes` (one may be -1): (2, 12).unflatten(1, (3, 4)) -> (2, 3, 4)."""
        d = self._axis(dim, "unflatten")
        return self.reshape(*self.shape[:d], *sizes, *self.shape[d + 1 :])

    # *** triangles and diagonals ***

    def _triangle(self: Tensor, keep_above: bool, diagonal: int, op: str) -> Tensor:
        if self.ndim < 2:
            raise ValueError(f"{op}: needs at least a 2-d tensor, got shape {self.shape}")
        rows, cols = self.shape[-2:]
        offset = _iota(cols, self).reshape(1, cols) - _iota(rows, self).reshape(rows, 1)  # column - row
        keep = offset >= diagonal if keep_above else offset <= diagonal
        return keep.where(self, _const(self, 0))

    def tril(self: Tensor, diagonal: int = 0) -> Tensor:
        """Zero the elements above `diagonal` of the last two axes (column - row > diagonal)."""
        return self._triangle(False, diagonal, "tril")

    def triu(self: Tensor, diagonal: int = 0) -> Tensor:
        """Zero the elements below `diagonal` of the last two axes (column - row < diagonal)."""
        return self._triangle(True, diagonal, "triu")

    def diag(self: Tensor) -> Tensor:
        """A 1-d tensor (n,) -> the (n, n) matrix with it on the diagonal."""
        if self.ndim != 1:
            raise ValueError(f"diag: expected a 1-d tensor, got shape {self.shape}")
        n = self.shape[0]
        # (n, 1) padded to (n, n + 1), read as (n, n): element i lands at row i, column i
        return self.reshape(n, 1).pad([None, (0, n)]).flatten().shrink([(0, n * n)]).reshape(n, n)

    def diagonal(self: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """The diagonal of the (dim1, dim2) planes as a new last axis; offset > 0 is above the main diagonal."""
        a, b = self._axis(dim1, "diagonal"), self._axis(dim2, "diagonal")
        if a == b:
            raise ValueError(f"diagonal: dim1 and dim2 must differ, got {dim1} and {dim2}")
        x = self.permute(*[i for i in range(self.ndim) if i not in (a, b)], a, b)
        rows, cols = x.shape[-2:]
        x = (
            _narrow(x, x.ndim - 1, min(offset, cols), cols)
            if offset >= 0
            else _narrow(x, x.ndim - 2, min(-offset, rows), rows)
        )
        n = min(x.shape[-2:])
        lead = x.shape[:-2]
        x = _narrow(_narrow(x, x.ndim - 2, 0, n), x.ndim - 1, 0, n).reshape(*lead, n * n)
        # rows of n + 1: element (i, i) of the square is at column 0 of row i
        return _pad_axis(x, len(lead), 0, n).reshape(*lead, n, n + 1)[..., 0]

    def meshgrid(self: Tensor, *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
        """Coordinate grids of 0-d/1-d tensors; 'xy' swaps the first two output axes (Cartesian)."""
        if indexing not in ("ij", "xy"):
            raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
        tensors = [self, *args]
        if any(t.ndim > 1 for t in tensors):
            raise ValueError(f"meshgrid: expects 0-d or 1-d tensors, got shapes {[t.shape for t in tensors]}")
        shape = [t.numel() for t in tensors]
        axes = list(range(len(tensors)))
        if indexing == "xy" and len(tensors) >= 2:
            shape[0], shape[1], axes[0], axes[1] = shape[1], shape[0], 1, 0
        out = []
        for t, axis in zip(tensors, axes, strict=True):
            ones = [1] * len(shape)
            ones[axis] = shape[axis]
            out.append(t.reshape(ones).expand(shape))
        return tuple(out)

    @staticmethod
    def linspace(
        start: int | float, stop: int | float, steps: int, dtype: DTypeLike | None = None, **kwargs: Any
    ) -> Tensor:
        """`steps` evenly spaced values from start to stop inclusive; both ends are exact (computed from each end)."""
        from fusegrad.tensor import Tensor

        if not isinstance(steps, int) or steps < 0:
            raise ValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        device, compute = kwargs.pop("device", None), dtypes.float64 if dt == dtypes.float64 else dtypes.float32
        if steps <= 1:
            return Tensor(Tensor.full((steps,), start, dtype=compute, device=device).cast(dt).uop, **kwargs)
        delta = (stop - start) / (steps - 1)
        i = Tensor.arange(steps, device=device).cast(compute)
        values = (i < steps // 2).where(i * delta + start, stop - (steps - 1 - i) * delta)
        return Tensor(values.cast(dt).uop, **kwargs)

    @staticmethod
    def eye(n: int, m: int | None = None, dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
        """The (n, m) identity: ones on the main diagonal. Example: `Tensor.eye(2).tolist() == [[1, 0], [0, 1]]`."""
        from fusegrad.tensor import Tensor

        cols = n if m is None else m
        if not all(isinstance(s, int) and s >= 0 for s in (n, cols)):
            raise ValueError(f"eye: sizes must be non-negative ints, got n={n!r}, m={m!r}")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        k = min(n, cols)
        square = Tensor.ones(k, dtype=dt, device=kwargs.pop("device", None)).diag()
        return Tensor(square.pad([(0, n - k), (0, cols - k)]).uop, **kwargs)

    # *** gather and scatter ***

    def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:
        """out[..., i, ...] = self[..., index[..., i, ...], ...] along dim; out has index's shape.

        Raises TypeError for a non-integer index, ValueError when index is larger than self outside dim.
        """
        if self.ndim == 0:
            return self.reshape(1).gather(0, index.reshape(1)).reshape(())
        d = self._axis(dim, "gather")
        if not dtypes.is_int(index.dtype):
            raise TypeError(f"gather: index must be an integer tensor, got {index.dtype}")
        if index.ndim != self.ndim or any(
            j > s for a, (j, s) in enumerate(zip(index.shape, self.shape, strict=True)) if a != d
        ):
            raise ValueError(f"gather: index shape {index.shape} does not fit self {self.shape} outside dim {d}")
        size = self.shape[d]
        x = self.shrink([(0, size) if a == d else (0, j) for a, j in enumerate(index.shape)])
        x = x.permute(*[a for a in range(self.ndim) if a != d], d).unsqueeze(d)  # (J with J[d] = 1..., S)
        onehot = index.unsqueeze(-1) == _iota(size, self).reshape((1,) * self.ndim + (size,))
        return _pick(onehot, x, (-1,))

    def scatter(
        self: Tensor,
        dim: int,
        index: Tensor,
        src: Tensor | ConstType,
        reduce: Literal["multiply", "add"] | None = None,
    ) -> Tensor:
        """Write src into self at index along dim (out[..., index[i], ...] = src[i]); duplicates: the last wins.

        With reduce "add" or "multiply" the values combine with self instead. Returns a new tensor.
        """
        d = self._axis(dim, "scatter")
        mask, order = _scatter_mask(self, d, index)
        values = _scatter_source(self, index, src, order)
        if reduce == "add":
            return self + _scatter_back(self, _pick(mask, values, (-2,)), order)
        if reduce == "multiply":
            product = mask.where(values, _const(values, 1)).prod(-2).cast(self.dtype)
            return self * _scatter_back(self, product, order, fill=1)
        if reduce is not None:
            raise ValueError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
        jd = index.shape[d]
        position = _iota(jd, self).reshape((1,) * (self.ndim - 1) + (jd, 1))
        last = mask.where(position, -1).max(-2, keepdim=True)  # the last index that hits each target
        chosen = _pick(mask & (position == last), values, (-2,))
        hit = _scatter_back(self, mask.cast(dtypes.int32).sum(-2) > 0, order)
        return hit.where(_scatter_back(self, chosen, order), self)

    def scatter_reduce(
        self: Tensor,
        dim: int,
        index: Tensor,
        src: Tensor,
        reduce: Literal["sum", "prod", "mean", "amax", "amin"],
        include_self: bool = True,
    ) -> Tensor:
        """Combine every src value scattered to a position with `reduce` (and self's value when include_self).

        Positions no index hits keep self's value. "mean" divides (true division: integers give floats).
        """
        from fusegrad.tensor import Tensor

        d = self._axis(dim, "scatter_reduce")
        if not isinstance(src, Tensor):
            raise TypeError(f"scatter_reduce: src must be a Tensor, got {type(src).__name__}")
        mask, order = _scatter_mask(self, d, index)
        values = _scatter_source(self, index, src, order)
        count = mask.cast(dtypes.int32).sum(-2)
        hit = _scatter_back(self, count > 0, order)
        if reduce in ("sum", "mean"):
            total = _scatter_back(self, _pick(mask, values, (-2,)), order)
            base = self if include_self else hit.where(_const(self, 0), self)
            if reduce == "sum":
                return base + total
            return hit.where((base + total) / (_scatter_back(self, count, order) + int(include_self)).maximum(1), self)
        if reduce == "prod":
            product = _scatter_back(self, mask.where(values, _const(values, 1)).prod(-2).cast(self.dtype), order, 1)
            return (self if include_self else hit.where(_const(self, 1), self)) * product
        if reduce not in ("amax", "amin"):
            raise ValueError(f"scatter_reduce: reduce must be sum, prod, mean, amax or amin, got {reduce!r}")
        empty = dtypes.min(self.dtype) if reduce == "amax" else dtypes.max(self.dtype)  # the reduction's identity
        masked = mask.where(values, _const(values, empty))
        best = _scatter_back(self, masked.max(-2) if reduce == "amax" else masked.min(-2), order, empty)
        if include_self:
            best = self.maximum(best) if reduce == "amax" else self.minimum(best)
        return hit.where(best, self)

    def masked_fill(self: Tensor, mask: Tensor, value: Tensor | ConstType) -> Tensor:
        """`value` where mask is True, self elsewhere (broadcasting; dtypes promote as in `where`)."""
        return mask.where(value, self)

    def masked_select(self: Tensor, mask: Tensor, size: int | None = None, fill_value: ConstType = 0) -> Tensor:
        """The elements where mask is True, flattened in order (1-d).

        Without `size`, the mask is realized to count them; with `size` the result has exactly that length
        (padded with fill_value or truncated) and nothing runs. Ranks are a prefix count: O(numel^2) work.
        """
        from fusegrad.tensor import Tensor

        shape = _broadcast_shapes([self.shape, mask.shape], "masked_select")
        x, m = (
            _broadcast_to(self, shape, "masked_select").flatten(),
            _broadcast_to(mask.bool(), shape, "masked_select").flatten(),
        )
        n = x.numel()
        selected = m.cast(dtypes.int32).sum()
        total = int(selected.item()) if size is None else size
        if n == 0 or total == 0:
            return Tensor.full((total,), fill_value, dtype=self.dtype, device=self.device)
        position = _iota(n, x)
        upto = position.reshape(1, n) <= position.reshape(n, 1)  # (i, j): j <= i
        rank = ((upto & m.reshape(1, n)).cast(dtypes.int32).sum(1) - 1).contiguous()  # slot of each selected element
        slot = _iota(total, x).reshape(total, 1)
        out = _pick(m.reshape(1, n) & (rank.reshape(1, n) == slot), x.reshape(1, n), (1,))
        return out if size is None else (_iota(total, x) < selected).where(out, _const(out, fill_value))

    def one_hot(self: Tensor, num_classes: int = -1) -> Tensor:
        """(...,) integer classes -> (..., num_classes) of int32 0/1; -1 means max + 1 (realizes the max)."""
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"one_hot: expected an integer tensor, got {self.dtype}")
        if num_classes == -1:
            if self.numel() == 0:
                raise ValueError("one_hot: cannot infer num_classes from an empty tensor")
            num_classes = int(self.max().item()) + 1
        if num_classes < 0:
            raise ValueError(f"one_hot: num_classes must be non-negative (or -1), got {num_classes}")
        classes = _iota(num_classes, self).reshape((1,) * self.ndim + (num_classes,))
        return (self.unsqueeze(-1) == classes).where(1, 0)

    # *** advanced indexing ***

    @staticmethod
    def _is_advanced_index(indices: Any) -> bool:
        """True when an index holds a tensor, list, tuple or numpy array: the core `__getitem__` routes it here."""
        import numpy as np

        from fusegrad.tensor import Tensor

        entries = indices if isinstance(indices, tuple) else (indices,)
        return any(isinstance(i, (Tensor, list, tuple, np.ndarray)) for i in entries)

    def _getitem_advanced(self: Tensor, indices: Any) -> Tensor:
        """Indexing with integer tensors/lists (broadcast together) and boolean masks, mixed with basic indices.

        Ints are applied first (as torch and tinygrad do); the broadcast index shape replaces adjacent indexed axes,
        or goes in front when they are not adjacent. Negative indices count from the end; out-of-range tensor
        indices give 0 (they cannot be checked without running). Example: `Tensor([5, 6, 7])[[2, 0]] -> [7, 5]`.
        """
        basic, tensors = _split_index(self, indices)
        view = self[tuple(basic)]
        if not tensors:
            return view
        mask, batch, rest = _index_masks(view, tensors)
        k, positions = len(tensors), [p for p, _ in tensors]
        values = view.permute(*rest, *positions)
        values = values.reshape((1,) * len(batch) + values.shape)  # (1 per batch axis..., rest..., S...)
        out = _pick_axes(mask, values, tuple(range(len(batch) + len(rest), len(batch) + len(rest) + k)))
        return _place_batch(out, len(batch), tensors)

    def __setitem__(self: Tensor, indices: Any, v: Tensor | ConstType | list[Any] | tuple[Any, ...]) -> None:
        """Write v (broadcast) into the indexed elements, in place when self is realized.

        Basic indices with steps of +-1 write through a view; other indices rewrite the whole tensor with a select.
        Raises TypeError when v's dtype differs from self's (Python values are cast).
        """
        from fusegrad.tensor import Tensor

        value = v if isinstance(v, Tensor) else Tensor(v, device=self.device, dtype=self.dtype)
        if value.dtype != self.dtype:
            raise TypeError(f"setitem: value dtype {value.dtype} does not match the target's {self.dtype}")
        if value.device != self.device:
            raise ValueError(f"setitem: value on {value.device} but target on {self.device}; use .to() first")
        if self.uop.base.op is not Ops.BUFFER:
            self.realize()  # settle pending writes; a lazy value gets memory to write into
        if self.uop.base.op is Ops.BUFFER and not self._is_advanced_index(indices) and _has_unit_steps(indices):
            view = self[indices]
            view.assign(_broadcast_to(value, view.shape, "setitem"))
            return
        self.assign(self._index_put(indices, value))

    def _index_put(self: Tensor, indices: Any, value: Tensor) -> Tensor:
        """self with the elements `self[indices]` replaced by value (broadcast); duplicate indices: the last wins."""
        from fusegrad.tensor import Tensor

        basic, tensors = _split_index(self, indices)
        view = self[tuple(basic)]
        if tensors:
            new, hit = _put_tensor_indexed(view, tensors, value)
        else:
            new = _broadcast_to(value, view.shape, "setitem")
            hit = Tensor.full(view.shape, True, dtype=dtypes.bool, device=self.device)
        return _unindex_basic(hit, basic, self.shape).where(_unindex_basic(new, basic, self.shape), self)


def _has_unit_steps(indices: Any) -> bool:
    entries = indices if isinstance(indices, tuple) else (indices,)
    return all(not isinstance(i, slice) or i.step in (None, 1, -1) for i in entries)


def _pick_axes(mask: Tensor, values: Tensor, axes: tuple[int, ...]) -> Tensor:
    """_pick over possibly no axes (a 0-d index reduces nothing)."""
    return _pick(mask, values, axes) if axes else mask.where(values, _const(values, 0))


def _put_tensor_indexed(view: Tensor, tensors: list[tuple[int, Tensor]], value: Tensor) -> tuple[Tensor, Tensor]:
    """(new values, hit mask) in view's shape for `view[tensors] = value`: a one-hot reduction over the batch."""
    mask, batch, rest = _index_masks(view, tensors)  # (B..., 1 per rest axis..., S...)
    positions, nb = [p for p, _ in tensors], len(batch)
    shape = tuple(view.shape[a] for a in rest) + tuple(view.shape[p] for p in positions)  # (rest..., S...)
    v = _unplace_batch(_broadcast_to(value, _placed_shape(batch, shape[: len(rest)], tensors), "setitem"), nb, tensors)
    batch_axes = tuple(range(nb))
    if nb:
        number = _iota(prod(batch), view).reshape(batch + (1,) * (mask.ndim - nb))  # each batch element's number
        last = mask.where(number, -1).max(batch_axes, keepdim=True)
        mask = mask & (number == last)  # duplicate indices: the last write wins, as in numpy
    new = _pick_axes(mask, v.reshape(v.shape + (1,) * len(positions)), batch_axes)
    hit = mask.cast(dtypes.int32).sum(batch_axes) > 0 if nb else mask
    inverse = _invert(rest + positions)
    return _broadcast_to(new, shape, "setitem").permute(inverse), _broadcast_to(hit, shape, "setitem").permute(inverse)
