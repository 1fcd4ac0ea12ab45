"""Tensor methods: movement and indexing beyond the core (cat, stack, split, pad modes, gather, scatter, setitem).

Everything is built from the core's movement ops (reshape, permute, expand, pad, shrink, flip) and elementwise ops.
Data-dependent selection (gather, scatter, tensor indices) compares the index with an IOTA (a one-hot mask) and
reduces over the indexed axis, so it fuses like any other reduction; only boolean masks and `masked_select` without
`size` realize a value on the host, because their result's shape depends on it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from fusegrad.dtype import ConstType, DTypeLike, dtypes, least_upper_dtype, to_dtype
from fusegrad.errors import OpValueError, UnsupportedModeError
from fusegrad.errors import RearrangeError as RearrangeError  # its home before errors.py
from fusegrad.helpers import argfix, ceildiv, prod
from fusegrad.mixin import traced
from fusegrad.mixin.indexing import (
    broadcast_shapes,
    broadcast_to,
    const_like,
    has_unit_steps,
    index_masks,
    iota,
    narrow,
    pad_axis,
    pick,
    place_batch,
    put_tensor_indexed,
    scatter_back,
    scatter_mask,
    scatter_source,
    split_index,
    unindex_basic,
)
from fusegrad.uop import Ops

if TYPE_CHECKING:
    from fusegrad.tensor import Tensor
    from fusegrad.uop.ops import sint


# *** small helpers ***


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
    left = narrow(x, axis, 1, before + 1).flip(axis)
    right = narrow(x, axis, size - 1 - after, size - 1).flip(axis)
    return left.cat(x, right, dim=axis)


def _replicate(x: Tensor, axis: int, before: int, after: int) -> Tensor:
    """Repeat the edge values: [1 2 3] padded (2, 1) -> [1 1 1 2 3 3]."""
    size = x.shape[axis]
    if size == 0:
        raise ValueError(f"pad: replicate padding needs a non-empty axis {axis}, got shape {x.shape}")
    left = narrow(x, axis, 0, 1).expand(*[before if a == axis else s for a, s in enumerate(x.shape)])
    right = narrow(x, axis, size - 1, size).expand(*[after if a == axis else s for a, s in enumerate(x.shape)])
    return left.cat(x, right, dim=axis)


def _circular(x: Tensor, axis: int, before: int, after: int) -> Tensor:
    """Wrap around: [1 2 3] padded (2, 1) -> [2 3 1 2 3 1]."""
    size = x.shape[axis]
    if before > size or after > size:
        raise UnsupportedModeError(
            f"pad: circular padding ({before}, {after}) wraps around more than once on axis {axis} of size {size}"
        )
    return narrow(x, axis, size - before, size).cat(x, narrow(x, axis, 0, after), dim=axis)


_PAD_MODES = {"reflect": _reflect, "replicate": _replicate, "circular": _circular}


# *** rearrange: einops formulas ***


ELLIPSIS = "..."
_TOKEN = re.compile(r"\.\.\.|[()]|[A-Za-z_][A-Za-z0-9_]*|\d+|\S")


def _parse_side(side: str, formula: str) -> list[list[str]]:
    """One side of the arrow as axis groups: "a (b c) ... 1" -> [["a"], ["b", "c"], ["..."], []]."""
    groups: list[list[str]] = []
    group: list[str] | None = None  # the names of the open parenthesis
    for token in _TOKEN.findall(side):
        if token == "(" and group is None:
            group = []
        elif token == ")" and group is not None:
            groups.append(group)
            group = None
        elif token == "1":  # a unit axis: size 1 on the left, a new axis on the right; nothing inside a group
            if group is None:
                groups.append([])
        elif token.isidentifier() and group is not None:
            group.append(token)
        elif token.isidentifier() or (token == ELLIPSIS and group is None):
            groups.append([token])
        else:
            raise RearrangeError(
                f"rearrange: unexpected {token!r} in {formula!r}: expected names, (groups), '...' or 1, not nested"
            )
    if group is not None:
        raise RearrangeError(f"rearrange: unclosed '(' in {formula!r}")
    return groups


def _parse_formula(formula: str, sizes: dict[str, int]) -> tuple[list[list[str]], list[list[str]]]:
    """Both sides of "left -> right", checked: each name once per side, the same names on both, sizes named left."""
    if formula.count("->") != 1:
        raise RearrangeError(f"rearrange: need exactly one '->' in {formula!r}")
    left, right = (_parse_side(side, formula) for side in formula.split("->"))
    left_names, right_names = ([n for g in side for n in g] for side in (left, right))
    for side, names in (("left", left_names), ("right", right_names)):
        if len(set(names)) != len(names):
            repeated = sorted({n for n in names if names.count(n) > 1})
            raise RearrangeError(f"rearrange: {repeated} appear twice on the {side} of {formula!r}")
    if set(left_names) != set(right_names):
        only = sorted(set(left_names) ^ set(right_names))
        raise RearrangeError(f"rearrange: {only} must appear on both sides of {formula!r}")
    if unused := sorted(set(sizes) - set(left_names)):
        raise RearrangeError(f"rearrange: sizes given for {unused}, which the left of {formula!r} does not name")
    return left, right


def _bind_axes(left: list[list[str]], shape: tuple[int, ...], formula: str, sizes: dict[str, int]) -> dict[str, int]:
    """Each name's size (the ellipsis' axes as "...0", "...1", ...), in left order; a group may leave one unknown."""
    named = sum(g != [ELLIPSIS] for g in left)
    if named > len(shape) or (named == len(left) and named != len(shape)):
        raise RearrangeError(f"rearrange: the left of {formula!r} names {named} axes, the tensor has shape {shape}")
    dims: dict[str, int] = {}
    axes = iter(shape)
    for group in left:
        if group == [ELLIPSIS]:
            for i in range(len(shape) - len(left) + 1):
                dims[f"{ELLIPSIS}{i}"] = next(axes)
            continue
        dims.update(_split_axis(group, next(axes), formula, sizes))
    return dims


def _split_axis(group: list[str], size: int, formula: str, sizes: dict[str, int]) -> dict[str, int]:
    """The sizes of the names merged into one axis of `size`: the given ones, and at most one inferred."""
    if not group and size != 1:
        raise RearrangeError(f"rearrange: a unit axis ('()' or 1) needs size 1, got {size} in {formula!r}")
    unknown = [n for n in group if n not in sizes]
    known = prod(sizes[n] for n in group if n in sizes)
    if len(unknown) > 1:
        raise RearrangeError(f"rearrange: cannot infer all of {unknown} in {formula!r}: pass sizes for all but one")
    inferred = size // known if known else 0
    if (unknown and inferred * known != size) or (not unknown and known != size):
        raise RearrangeError(f"rearrange: an axis of size {size} cannot split into {group} in {formula!r} ({sizes=})")
    return {n: sizes.get(n, inferred) for n in group}


def _expand_ellipsis(groups: list[list[str]], dims: dict[str, int]) -> list[list[str]]:
    """The right side with '...' replaced by the ellipsis' axes, one group each."""
    held = [[n] for n in dims if n.startswith(ELLIPSIS)]
    expanded: list[list[str]] = []
    for group in groups:
        expanded.extend(held if group == [ELLIPSIS] else [group])
    return expanded


class MovementMixin:
    """Mixed into Tensor; see the module docstring."""

    __slots__ = ()

    # *** tiling and padding ***

    @traced
    def repeat(self: Tensor, repeats: Any, *args: int) -> Tensor:
        """Tile along each axis: (2, 3).repeat(2, 1, 2) -> (2, 4, 6). Leading repeats add axes.

        Args:
            repeats: the count for each axis (ints or one tuple).
            *args: more counts, when repeats is an int.

        Returns:
            The tiled tensor.

        Raises:
            ValueError: fewer counts than axes, or a negative count.

        Examples:
            >>> Tensor([1, 2]).repeat(2).tolist(), Tensor([1, 2]).repeat(2, 1).tolist()
            ([1, 2, 1, 2], [[1, 2], [1, 2]])
        """
        reps = tuple(argfix(repeats, *args))
        if len(reps) < self.ndim or any(r < 0 for r in reps):
            raise ValueError(
                f"repeat: need {self.ndim} or more non-negative repeats for shape {self.shape}, got {reps}"
            )
        shape = (1,) * (len(reps) - self.ndim) + self.shape
        x = self.reshape(*[d for s in shape for d in (1, s)])  # (1, s0, 1, s1, ...)
        x = x.expand(*[d for r, s in zip(reps, shape, strict=True) for d in (r, s)])  # (r0, s0, r1, s1, ...)
        return x.reshape(*[r * s for r, s in zip(reps, shape, strict=True)])

    @traced
    def repeat_interleave(self: Tensor, repeats: int, dim: int | None = None) -> Tensor:
        """Repeat each element `repeats` times along dim (flattened first when dim is None): [1 2] -> [1 1 2 2].

        Args:
            repeats: how many times (>= 0).
            dim: the axis (None: the flattened tensor).

        Returns:
            The repeated tensor.

        Raises:
            ValueError: a negative repeats.

        Examples:
            >>> Tensor([[1, 2]]).repeat_interleave(2).tolist()
            [1, 1, 2, 2]
        """
        if not isinstance(repeats, int) or repeats < 0:
            raise ValueError(f"repeat_interleave: repeats must be a non-negative int, got {repeats!r}")
        x = self.flatten() if dim is None else self
        d = x._axis(0 if dim is None else dim, "repeat_interleave")
        s = x.shape
        x = x.reshape(*s[: d + 1], 1, *s[d + 1 :]).expand(*s[: d + 1], repeats, *s[d + 1 :])
        return x.reshape(*s[:d], s[d] * repeats, *s[d + 1 :])

    @traced
    def pad_to(self: Tensor, shape: Any, *args: int | None, value: ConstType = 0) -> Tensor:
        """Pad at the end of each axis up to `shape` (None keeps an axis).

        Args:
            shape: the new sizes (ints or None, or one tuple).
            *args: more sizes, when shape is an int or None.
            value: the fill value.

        Returns:
            The padded tensor.

        Raises:
            ValueError: a size smaller than the axis, or the wrong number of sizes.

        Examples:
            >>> Tensor([[1, 2]]).pad_to(2, 3).tolist()
            [[1, 2, 0], [0, 0, 0]]
        """
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
            raise UnsupportedModeError(
                f"pad: mode {mode!r} is not supported: expected constant, reflect, replicate or circular"
            )
        if value != 0:
            raise ValueError(f"pad: value={value} only applies to mode 'constant', got mode {mode!r}")
        x = self
        for axis, (before, after) in enumerate(pairs):
            if mode == "circular":
                x = narrow(x, axis, max(0, -before), x.shape[axis] - max(0, -after))
            if before > 0 or after > 0:
                x = _PAD_MODES[mode](x, axis, max(0, before), max(0, after))
            if mode != "circular":
                x = narrow(x, axis, max(0, -before), x.shape[axis] - max(0, -after))
        return x

    @traced
    def roll(self: Tensor, shifts: int | tuple[int, ...], dims: int | tuple[int, ...] | None = None) -> Tensor:
        """Shift elements circularly along dims (the flattened tensor when None): [1 2 3].roll(1) -> [3 1 2].

        Args:
            shifts: one shift per dim (negative: toward the start).
            dims: the axes (None: the flattened tensor, with one shift).

        Returns:
            The rolled tensor, the same shape.

        Raises:
            OpValueError: (a ValueError and RuntimeError) not one shift per dim.

        Examples:
            >>> Tensor([1, 2, 3]).roll(1).tolist(), Tensor([[1, 2], [3, 4]]).roll(1, 0).tolist()
            ([3, 1, 2], [[3, 4], [1, 2]])
        """
        shift_list = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        if dims is None:
            if len(shift_list) != 1:
                raise OpValueError(f"roll: without dims, shifts must be one int, got {shifts}")
            return self.flatten().roll(shift_list[0], 0).reshape(self.shape)
        dim_list = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(shift_list) != len(dim_list):
            raise OpValueError(f"roll: {len(shift_list)} shifts for {len(dim_list)} dims")
        x = self
        for shift, dim in zip(shift_list, dim_list, strict=True):
            d = x._axis(dim, "roll")
            size = x.shape[d]
            if size and shift % size:
                k = shift % size
                x = narrow(x, d, size - k, size).cat(narrow(x, d, 0, size - k), dim=d)
        return x

    # *** joining and splitting ***

    @traced
    def cat(self: Tensor, *args: Tensor, dim: int = 0) -> Tensor:
        """Join tensors along an existing axis; dtypes promote. (2, 3).cat((4, 3)) -> (6, 3).

        Args:
            *args: the tensors to append.
            dim: the axis to join along.

        Returns:
            The joined tensor.

        Raises:
            TypeError: an argument that is not a Tensor.
            ValueError: shapes that differ outside dim, or tensors on different devices.
            IndexError: 0-d tensors (they have no axis to join along).

        Examples:
            >>> Tensor([[1, 2]]).cat(Tensor([[3, 4]]), dim=0).tolist(), Tensor([1]).cat(Tensor([2.5])).tolist()
            ([[1, 2], [3, 4]], [1.0, 2.5])
        """
        cls = type(self)

        tensors = [self, *args]
        if not all(isinstance(t, cls) for t in tensors):
            raise TypeError(f"cat: expected Tensors, got {[type(t).__name__ for t in tensors]}")
        if self.ndim == 0:
            raise IndexError("cat: zero-dimensional tensors cannot be concatenated: they have no dim to join along")
        d = self._axis(dim, "cat")
        for t in args:
            if t.ndim != self.ndim or t.shape[:d] + t.shape[d + 1 :] != self.shape[:d] + self.shape[d + 1 :]:
                shapes = " and ".join(str(u.shape) for u in tensors)
                raise ValueError(f"cat: shapes {shapes} differ outside dim {d}")
            if t.device != self.device:
                raise ValueError(f"cat: tensors on different devices {self.device} and {t.device}; use .to() first")
        dt = least_upper_dtype(*(t.dtype for t in tensors))
        sizes = [t.shape[d] for t in tensors]
        total, offset, out = sum(sizes), 0, None
        for t, size in zip(tensors, sizes, strict=True):
            placed = pad_axis(t.cast(dt), d, offset, total - offset - size)
            if out is None:
                out = placed
            elif size:  # where, not add: keeps -0.0 and works for bool
                region = cls.full(t.shape, True, dtype=dtypes.bool, device=t.device)
                out = pad_axis(region, d, offset, total - offset - size).where(placed, out)
            offset += size
        assert out is not None, "cat: at least self is joined"
        return out

    @traced
    def stack(self: Tensor | Sequence[Tensor], *args: Tensor, dim: int = 0) -> Tensor:
        """Join equal-shaped tensors along a new axis: three (2, 3) tensors stacked at dim 1 -> (2, 3, 3).
        Takes `a.stack(b, c)`, `Tensor.stack(a, b, c)` or `Tensor.stack([a, b, c])`.

        Args:
            *args: the other tensors.
            dim: where the new axis goes.

        Returns:
            The stacked tensor.

        Raises:
            ValueError: a sequence followed by more tensors, or shapes that differ.
            IndexError: dim out of range.

        Examples:
            >>> Tensor.stack([Tensor([1, 2]), Tensor([3, 4])], dim=1).tolist()
            [[1, 3], [2, 4]]
        """
        # `Tensor.stack([a, b])` passes the sequence as self (every Tensor is a MovementMixin)
        if not isinstance(self, MovementMixin) and args:
            raise ValueError(f"stack: give the tensors either as one sequence or one by one, got a sequence and {args}")
        first, *rest = (self, *args) if isinstance(self, MovementMixin) else self
        for t in rest:
            if t.shape != first.shape:
                raise ValueError(f"stack: all tensors need the same shape: got {first.shape} and {t.shape}")
        if not -first.ndim - 1 <= dim <= first.ndim:
            raise IndexError(
                f"stack: dim {dim} out of range for {first.ndim + 1}-d result ({-first.ndim - 1}..{first.ndim})"
            )
        d = dim % (first.ndim + 1)
        return first.unsqueeze(d).cat(*[t.unsqueeze(d) for t in rest], dim=d)

    @traced
    def split(self: Tensor, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """Pieces of `sizes` elements along dim (an int: equal pieces, the last may be smaller).

        Args:
            sizes: the size of each piece, or one size for all.
            dim: the axis to split.

        Returns:
            The pieces, views of self.

        Raises:
            ValueError: sizes that do not add up to the axis, or a size < 1.

        Examples:
            >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).split(2)]
            [[1, 2], [3, 4], [5]]
            >>> [t.tolist() for t in Tensor([1, 2, 3]).split([1, 2])]
            [[1], [2, 3]]
        """
        d = self._axis(dim, "split")
        size = self.shape[d]
        if isinstance(sizes, int):
            if sizes <= 0:
                raise ValueError(f"split: split size must be positive, got {sizes}")
            sizes = [min(sizes, size - i) for i in range(0, max(1, size), sizes)]
        if sum(sizes) != size or any(s < 0 for s in sizes):
            raise ValueError(f"split: sizes {list(sizes)} must be non-negative and sum to {size} (dim {d})")
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        return tuple(narrow(self, d, s, s + n) for s, n in zip(starts, sizes, strict=True))

    @traced
    def chunk(self: Tensor, chunks: int, dim: int = 0) -> list[Tensor]:
        """At most `chunks` pieces of ceil(size / chunks) elements along dim (the last may be smaller).

        Args:
            chunks: how many pieces at most (>= 1).
            dim: the axis to split.

        Returns:
            The pieces, views of self.

        Raises:
            ValueError: chunks < 1.

        Examples:
            >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).chunk(2)]
            [[1, 2, 3], [4, 5]]
        """
        if chunks <= 0:
            raise ValueError(f"chunk: number of chunks must be positive, got {chunks}")
        d = self._axis(dim, "chunk")
        size = self.shape[d]
        return list(self.split(ceildiv(size, chunks), d)) if size else [self] * chunks

    @traced
    def unfold(self: Tensor, dim: int, size: int, step: int) -> Tensor:
        """Sliding windows: dim becomes (size - window) // step + 1 windows and a new last axis holds each window.

        Args:
            dim: the axis to slide along.
            size: the window's length.
            step: the distance between windows (>= 1).

        Returns:
            The windows, a view of self.

        Raises:
            OpValueError: (a ValueError) size outside 0..the axis's length, or step < 1.
            ValueError: a 0-d tensor.

        Examples:
            >>> Tensor([1, 2, 3, 4, 5]).unfold(0, 2, 2).tolist()
            [[1, 2], [3, 4]]
        """
        if self.ndim == 0:
            raise ValueError("unfold: needs at least a 1-d tensor")
        d = self._axis(dim, "unfold")
        n = self.shape[d]
        if not 0 <= size <= n or step <= 0:
            raise OpValueError(f"unfold: need 0 <= size <= {n} and step > 0 on dim {d}, got size={size}, step={step}")
        others = [a for a in range(self.ndim) if a != d]
        x = self.permute(*others, d)  # (..., n)
        lead = x.shape[:-1]
        # tile `size` copies, pad each row by one: row k of (size, n + 1) then starts at x[k] (windows on the diagonal)
        x = x.unsqueeze(-2).expand(*lead, size, n).reshape(*lead, size * n)
        x = pad_axis(x, x.ndim - 1, 0, size).reshape(*lead, size, n + 1)  # [..., k, i] = x[i + k]
        x = narrow(x, x.ndim - 1, 0, n - size + 1)[..., ::step]  # (..., size, windows)
        return x.permute(*range(d), x.ndim - 1, *range(d, x.ndim - 2), x.ndim - 2)

    @traced
    def unflatten(self: Tensor, dim: int, sizes: tuple[int, ...]) -> Tensor:
        """Split one axis into `sizes` (one may be -1): (2, 12).unflatten(1, (3, 4)) -> (2, 3, 4).

        Args:
            dim: the axis to split.
            sizes: the new axes' sizes (their product is the axis size; one may be -1).

        Returns:
            A view with the new shape.

        Examples:
            >>> Tensor.zeros(2, 12).unflatten(1, (3, -1)).shape
            (2, 3, 4)
        """
        d = self._axis(dim, "unflatten")
        return self.reshape(*self.shape[:d], *sizes, *self.shape[d + 1 :])

    @traced
    def rearrange(self: Tensor, formula: str, **sizes: int) -> Tensor:
        """Reshape, permute, split and merge axes by an einops formula: names for axes, `(a b)` for merged axes,
        `...` for the axes not named, `()` or `1` for a unit axis; `sizes` fixes names a split cannot infer.
        `(2, 12)` with `"b (h d) -> h b d", h=3` -> `(3, 2, 4)`.

        Args:
            formula: "input axes -> output axes".
            **sizes: sizes of split axes that cannot be inferred.

        Returns:
            The rearranged tensor.

        Raises:
            RearrangeError: (a ValueError and an AssertionError, the reference's type) a malformed formula, names that
                do not match across the arrow, or sizes that do not divide.

        Examples:
            >>> Tensor.zeros(2, 12).rearrange("b (h d) -> h b d", h=3).shape
            (3, 2, 4)
        """
        left, right = _parse_formula(formula, sizes)
        dims = _bind_axes(left, self.shape, formula, sizes)  # name -> size, in left order
        names = list(dims)
        order = [names.index(n) for group in _expand_ellipsis(right, dims) for n in group]
        out_shape = [prod(dims[n] for n in group) for group in _expand_ellipsis(right, dims)]
        # (left axes) -> one axis per name -> names in right order -> (right groups)
        return self.reshape(tuple(dims.values())).permute(order).reshape(tuple(out_shape))

    # *** triangles and diagonals ***

    def _triangle(self: Tensor, keep_above: bool, diagonal: sint, op: str) -> Tensor:
        if self.ndim < 2:
            raise ValueError(f"{op}: needs at least a 2-d tensor, got shape {self.shape}")
        rows, cols = self.shape[-2:]
        offset = iota(cols, self).reshape(1, cols) - iota(rows, self).reshape(rows, 1)  # column - row
        keep = offset >= diagonal if keep_above else offset <= diagonal
        return keep.where(self, const_like(self, 0))

    @traced
    def tril(self: Tensor, diagonal: sint = 0) -> Tensor:
        """Zero the elements above `diagonal` of the last two axes (column - row > diagonal).

        Args:
            diagonal: which diagonal to keep up to (0: the main one, 1: one above); a bound Variable too.

        Returns:
            The lower triangle, the same shape.

        Examples:
            >>> Tensor.ones(2, 3).tril().tolist()
            [[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]
        """
        return self._triangle(False, diagonal, "tril")

    @traced
    def triu(self: Tensor, diagonal: sint = 0) -> Tensor:
        """Zero the elements below `diagonal` of the last two axes (column - row < diagonal).

        Args:
            diagonal: which diagonal to keep from (0: the main one, 1: one above); a bound Variable too.

        Returns:
            The upper triangle, the same shape.

        Examples:
            >>> Tensor.ones(2, 3).triu(1).tolist()
            [[0.0, 1.0, 1.0], [0.0, 0.0, 1.0]]
        """
        return self._triangle(True, diagonal, "triu")

    @traced
    def diag(self: Tensor) -> Tensor:
        """A 1-d tensor (n,) -> the (n, n) matrix with it on the diagonal.

        Returns:
            The (n, n) matrix.

        Raises:
            ValueError: self is not 1-d.

        Examples:
            >>> Tensor([1, 2]).diag().tolist()
            [[1, 0], [0, 2]]
        """
        if self.ndim != 1:
            raise ValueError(f"diag: expected a 1-d tensor, got shape {self.shape}")
        n = self.shape[0]
        # (n, 1) padded to (n, n + 1), read as (n, n): element i lands at row i, column i
        return self.reshape(n, 1).pad([None, (0, n)]).flatten().shrink([(0, n * n)]).reshape(n, n)

    @traced
    def diagonal(self: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """The diagonal of the (dim1, dim2) planes as a new last axis; offset > 0 is above the main diagonal.

        Args:
            offset: which diagonal (> 0 above the main one, < 0 below).
            dim1: the plane's first axis.
            dim2: the plane's second axis.

        Returns:
            The diagonal, with dim1 and dim2 replaced by a last axis.

        Raises:
            ValueError: dim1 equal to dim2.

        Examples:
            >>> m = Tensor([[1, 2], [3, 4]])
            >>> m.diagonal().tolist(), m.diagonal(offset=1).tolist()
            ([1, 4], [2])
        """
        a, b = self._axis(dim1, "diagonal"), self._axis(dim2, "diagonal")
        if a == b:
            raise ValueError(f"diagonal: dim1 and dim2 must differ, got {dim1} and {dim2}")
        x = self.permute(*[i for i in range(self.ndim) if i not in (a, b)], a, b)
        rows, cols = x.shape[-2:]
        x = (
            narrow(x, x.ndim - 1, min(offset, cols), cols)
            if offset >= 0
            else narrow(x, x.ndim - 2, min(-offset, rows), rows)
        )
        n = min(x.shape[-2:])
        lead = x.shape[:-2]
        x = narrow(narrow(x, x.ndim - 2, 0, n), x.ndim - 1, 0, n).reshape(*lead, n * n)
        # rows of n + 1: element (i, i) of the square is at column 0 of row i
        return pad_axis(x, len(lead), 0, n).reshape(*lead, n, n + 1)[..., 0]

    @traced
    def meshgrid(self: Tensor, *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
        """Coordinate grids of 0-d/1-d tensors; 'xy' swaps the first two output axes (Cartesian).

        Args:
            *args: the other coordinate tensors.
            indexing: "ij" (matrix) or "xy" (Cartesian).

        Returns:
            One grid per input, each of every input's length.

        Raises:
            OpValueError: (a ValueError) an unknown indexing.
            ValueError: an input with more than one axis.

        Examples:
            >>> [g.tolist() for g in Tensor([1, 2]).meshgrid(Tensor([3, 4, 5]))]
            [[[1, 1, 1], [2, 2, 2]], [[3, 4, 5], [3, 4, 5]]]
        """
        if indexing not in ("ij", "xy"):
            raise OpValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
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

    @classmethod
    @traced
    def linspace(
        cls: type[Tensor],
        start: int | float,
        stop: int | float,
        steps: int,
        dtype: DTypeLike | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """`steps` evenly spaced values from start to stop inclusive; both ends are exact (computed from each end).

        Args:
            start: the first value.
            stop: the last value.
            steps: how many values (>= 0).
            dtype: the result's dtype (default: the default float).
            **kwargs: device, and what is passed on to the result.

        Returns:
            A (steps,) tensor.

        Raises:
            ValueError: a negative steps, or a bool dtype.

        Examples:
            >>> Tensor.linspace(0, 1, 5).tolist()
            [0.0, 0.25, 0.5, 0.75, 1.0]
        """
        if not isinstance(steps, int) or steps < 0:
            raise ValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if dt == dtypes.bool:
            raise ValueError("linspace: bool dtype is not supported: got dtypes.bool, expected an int or float dtype")
        device, compute = kwargs.pop("device", None), dtypes.float64 if dt == dtypes.float64 else dtypes.float32
        if steps <= 1:
            return cls(cls.full((steps,), start, dtype=compute, device=device).cast(dt).uop, **kwargs)
        delta = (stop - start) / (steps - 1)
        i = cls.arange(steps, device=device).cast(compute)
        values = (i < steps // 2).where(i * delta + start, stop - (steps - 1 - i) * delta)
        return cls(values.cast(dt).uop, **kwargs)

    @classmethod
    @traced
    def eye(cls: type[Tensor], n: int, m: int | None = None, dtype: DTypeLike | None = None, **kwargs: Any) -> Tensor:
        """The (n, m) identity: ones on the main diagonal.

        Args:
            n: rows.
            m: columns (default: n).
            dtype: the result's dtype (default: the default float).
            **kwargs: device, and what is passed on to the result.

        Returns:
            An (n, m) tensor.

        Raises:
            ValueError: a negative n or m.

        Examples:
            >>> Tensor.eye(2, 3, dtype=dtypes.int).tolist()
            [[1, 0, 0], [0, 1, 0]]
        """
        cols = n if m is None else m
        if not all(isinstance(s, int) and s >= 0 for s in (n, cols)):
            raise ValueError(f"eye: sizes must be non-negative ints, got n={n!r}, m={m!r}")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        k = min(n, cols)
        square = cls.ones(k, dtype=dt, device=kwargs.pop("device", None)).diag()
        return cls(square.pad([(0, n - k), (0, cols - k)]).uop, **kwargs)

    # *** gather and scatter ***

    @traced
    def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:
        """out[..., i, ...] = self[..., index[..., i, ...], ...] along dim; out has index's shape.

        Args:
            dim: the axis to index.
            index: integer indices, no larger than self outside dim.

        Returns:
            A tensor of index's shape.

        Raises:
            TypeError: a non-integer index.
            OpValueError: (a ValueError and RuntimeError) index larger than self outside dim.

        Examples:
            >>> Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[1, 0], [0, 0]])).tolist()
            [[2, 1], [3, 3]]
        """
        if self.ndim == 0:
            return self.reshape(1).gather(0, index.reshape(1)).reshape(())
        d = self._axis(dim, "gather")
        if not dtypes.is_int(index.dtype):
            raise TypeError(f"gather: index must be an integer tensor, got {index.dtype}")
        if index.ndim != self.ndim or any(
            j > s for a, (j, s) in enumerate(zip(index.shape, self.shape, strict=True)) if a != d
        ):
            raise OpValueError(f"gather: index shape {index.shape} does not fit self {self.shape} outside dim {d}")
        size = self.shape[d]
        x = self.shrink([(0, size) if a == d else (0, j) for a, j in enumerate(index.shape)])
        x = x.permute(*[a for a in range(self.ndim) if a != d], d).unsqueeze(d)  # (J with J[d] = 1..., S)
        onehot = index.unsqueeze(-1) == iota(size, self).reshape((1,) * self.ndim + (size,))
        return pick(onehot, x, (-1,))

    @traced
    def scatter(
        self: Tensor,
        dim: int,
        index: Tensor,
        src: Tensor | ConstType,
        reduce: Literal["multiply", "add"] | None = None,
    ) -> Tensor:
        """Write src into self at index along dim (out[..., index[i], ...] = src[i]); duplicates: the last wins.

        With reduce "add" or "multiply" the scalar src combines with self instead (use `scatter_reduce` for a tensor
        src).

        Args:
            dim: the axis to index.
            index: integer positions along dim.
            src: the values (a tensor at least index's shape, or a scalar).
            reduce: None (write), "add" or "multiply" (scalar src only).

        Returns:
            A new tensor.

        Raises:
            TypeError: a tensor src with reduce "add" or "multiply".
            ValueError: an unknown reduce.

        Examples:
            >>> Tensor.zeros(3, dtype=dtypes.int).scatter(0, Tensor([2, 0]), Tensor([7, 8])).tolist()
            [8, 0, 7]
        """
        if reduce is not None and isinstance(src, type(self)):
            raise TypeError(f"scatter: reduce={reduce!r} takes a scalar src, got a Tensor: use scatter_reduce")
        d = self._axis(dim, "scatter")
        mask, order = scatter_mask(self, d, index)
        values = scatter_source(self, index, src, order)
        if reduce == "add":
            return self + scatter_back(self, pick(mask, values, (-2,)), order)
        if reduce == "multiply":
            product = mask.where(values, const_like(values, 1)).prod(-2).cast(self.dtype)
            return self * scatter_back(self, product, order, fill=1)
        if reduce is not None:
            raise ValueError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
        jd = index.shape[d]
        position = iota(jd, self).reshape((1,) * (self.ndim - 1) + (jd, 1))
        last = mask.where(position, -1).max(-2, keepdim=True)  # the last index that hits each target
        chosen = pick(mask & (position == last), values, (-2,))
        hit = scatter_back(self, mask.cast(dtypes.int32).sum(-2) > 0, order)
        return hit.where(scatter_back(self, chosen, order), self)

    @traced
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

        Args:
            dim: the axis to index.
            index: integer positions along dim.
            src: the values, at least index's shape.
            reduce: "sum", "prod", "mean", "amax" or "amin".
            include_self: combine self's value too.

        Returns:
            A new tensor.

        Raises:
            TypeError: src is not a Tensor.
            OpValueError: (a ValueError) an unknown reduce.

        Examples:
            >>> Tensor([1, 1, 1]).scatter_reduce(0, Tensor([0, 0, 2]), Tensor([5, 6, 7]), "sum").tolist()
            [12, 1, 8]
        """
        cls = type(self)

        d = self._axis(dim, "scatter_reduce")
        if not isinstance(src, cls):
            raise TypeError(f"scatter_reduce: src must be a Tensor, got {type(src).__name__}")
        mask, order = scatter_mask(self, d, index)
        values = scatter_source(self, index, src, order)
        count = mask.cast(dtypes.int32).sum(-2)
        hit = scatter_back(self, count > 0, order)
        if reduce in ("sum", "mean"):
            total = scatter_back(self, pick(mask, values, (-2,)), order)
            base = self if include_self else hit.where(const_like(self, 0), self)
            if reduce == "sum":
                return base + total
            return hit.where((base + total) / (scatter_back(self, count, order) + int(include_self)).maximum(1), self)
        if reduce == "prod":
            product = scatter_back(self, mask.where(values, const_like(values, 1)).prod(-2).cast(self.dtype), order, 1)
            return (self if include_self else hit.where(const_like(self, 1), self)) * product
        if reduce not in ("amax", "amin"):
            raise OpValueError(f"scatter_reduce: reduce must be sum, prod, mean, amax or amin, got {reduce!r}")
        empty = dtypes.min(self.dtype) if reduce == "amax" else dtypes.max(self.dtype)  # the reduction's identity
        masked = mask.where(values, const_like(values, empty))
        best = scatter_back(self, masked.max(-2) if reduce == "amax" else masked.min(-2), order, empty)
        if include_self:
            best = self.maximum(best) if reduce == "amax" else self.minimum(best)
        return hit.where(best, self)

    @traced
    def masked_fill(self: Tensor, mask: Tensor, value: Tensor | ConstType) -> Tensor:
        """`value` where mask is True, self elsewhere (broadcasting; dtypes promote as in `where`).

        Args:
            mask: a bool tensor, broadcast to self.
            value: the fill value (a scalar or tensor).

        Returns:
            A new tensor.

        Examples:
            >>> Tensor([1, 2, 3]).masked_fill(Tensor([True, False, True]), 0).tolist()
            [0, 2, 0]
        """
        return mask.where(value, self)

    @traced
    def masked_select(self: Tensor, mask: Tensor, size: int | None = None, fill_value: ConstType = 0) -> Tensor:
        """The elements where mask is True, flattened in order (1-d).

        Without `size`, the mask is realized to count them; with `size` the result has exactly that length
        (padded with fill_value or truncated) and nothing runs. Ranks are a prefix count: O(numel^2) work.

        Args:
            mask: a bool tensor, broadcast to self.
            size: the result's length (None: the count of True, read from the device).
            fill_value: what pads a result longer than the count.

        Returns:
            A 1-d tensor.

        Examples:
            >>> x, mask = Tensor([1, 2, 3]), Tensor([True, False, True])
            >>> x.masked_select(mask).tolist(), x.masked_select(mask, size=3, fill_value=-1).tolist()
            ([1, 3], [1, 3, -1])
        """
        shape = broadcast_shapes([self.shape, mask.shape], "masked_select")
        x, m = (
            broadcast_to(self, shape, "masked_select").flatten(),
            broadcast_to(mask.bool(), shape, "masked_select").flatten(),
        )
        n = x.numel()
        selected = m.cast(dtypes.int32).sum()
        total = int(selected.item()) if size is None else size
        if n == 0 or total == 0:
            return type(self).full((total,), fill_value, dtype=self.dtype, device=self.device)
        position = iota(n, x)
        upto = position.reshape(1, n) <= position.reshape(n, 1)  # (i, j): j <= i
        rank = ((upto & m.reshape(1, n)).cast(dtypes.int32).sum(1) - 1).contiguous()  # slot of each selected element
        slot = iota(total, x).reshape(total, 1)
        out = pick(m.reshape(1, n) & (rank.reshape(1, n) == slot), x.reshape(1, n), (1,))
        return out if size is None else (iota(total, x) < selected).where(out, const_like(out, fill_value))

    @traced
    def nonzero(self: Tensor, size: int | None = None, fill_value: ConstType = 0) -> Tensor:
        """The indices of the non-zero elements, row-major: (d0, .., dk) -> int32 (count, k + 1), like torch.nonzero.
        Without `size` the count is read from the device (so it does not run in a TinyJit); with `size` the result
        has exactly `size` rows, padded with `fill_value` or truncated.

        Args:
            size: the number of rows (None: the count, read from the device).
            fill_value: what pads the extra rows.

        Returns:
            An int32 (count, ndim) tensor.

        Examples:
            >>> Tensor([1, 0, 2]).nonzero().tolist(), Tensor([[0, 3], [4, 0]]).nonzero().tolist()
            ([[0], [2]], [[0, 1], [1, 0]])
        """
        cls = type(self)

        if self.ndim == 0:
            rows = size if size is not None else int((self != 0).item())
            return cls.zeros(rows, 0, dtype=dtypes.int32, device=self.device)
        grids = [iota(s, self).reshape(*[1] * a, s, *[1] * (self.ndim - a - 1)).expand(*self.shape).flatten()
                 for a, s in enumerate(self.shape)]  # fmt: skip
        coords = cls.stack(*grids, dim=-1).cast(dtypes.int32)  # (numel, ndim): each element's index
        mask = (self != 0).flatten().unsqueeze(-1).expand(*coords.shape)
        flat_size = None if size is None else size * self.ndim
        return coords.masked_select(mask, size=flat_size, fill_value=fill_value).reshape(-1, self.ndim)

    @traced
    def one_hot(self: Tensor, num_classes: int = -1) -> Tensor:
        """(...,) integer classes -> (..., num_classes) of int32 0/1; -1 means max + 1 (realizes the max).

        Args:
            num_classes: the length of the new last axis (-1: the largest class + 1).

        Returns:
            The one-hot tensor.

        Raises:
            TypeError: classes that are not integers.
            ValueError: a negative num_classes other than -1, or -1 with an empty tensor.

        Examples:
            >>> Tensor([0, 2]).one_hot(3).tolist()
            [[1, 0, 0], [0, 0, 1]]
        """
        if not dtypes.is_int(self.dtype):
            raise TypeError(f"one_hot: expected an integer tensor, got {self.dtype}")
        if num_classes == -1:
            if self.numel() == 0:
                raise ValueError("one_hot: cannot infer num_classes from an empty tensor")
            num_classes = int(self.max().item()) + 1
        if num_classes < 0:
            raise ValueError(f"one_hot: num_classes must be non-negative (or -1), got {num_classes}")
        classes = iota(num_classes, self).reshape((1,) * self.ndim + (num_classes,))
        return (self.unsqueeze(-1) == classes).where(1, 0)

    # *** advanced indexing ***

    def _is_advanced_index(self: Tensor, indices: Any) -> bool:
        """True when an index holds a tensor, list, tuple or numpy array: the core `__getitem__` routes it here."""
        import numpy as np

        entries = indices if isinstance(indices, tuple) else (indices,)
        return any(isinstance(i, (type(self), list, tuple, np.ndarray)) for i in entries)

    def _getitem_advanced(self: Tensor, indices: Any) -> Tensor:
        """Indexing with integer tensors/lists (broadcast together) and boolean masks, mixed with basic indices.

        Ints are applied first (as torch and tinygrad do); the broadcast index shape replaces adjacent indexed axes,
        or goes in front when they are not adjacent. Negative indices count from the end; out-of-range tensor
        indices give 0 (they cannot be checked without running). Example: `Tensor([5, 6, 7])[[2, 0]] -> [7, 5]`.
        """
        basic, tensors = split_index(self, indices)
        view = self[tuple(basic)]
        if not tensors:
            return view
        mask, batch, rest = index_masks(view, tensors)
        k, positions = len(tensors), [p for p, _ in tensors]
        values = view.permute(*rest, *positions)
        values = values.reshape((1,) * len(batch) + values.shape)  # (1 per batch axis..., rest..., S...)
        out = pick(mask, values, tuple(range(len(batch) + len(rest), len(batch) + len(rest) + k)))
        return place_batch(out, len(batch), tensors)

    @traced
    def __setitem__(self: Tensor, indices: Any, v: Tensor | ConstType | list[Any] | tuple[Any, ...]) -> None:
        """Write v (broadcast) into the indexed elements, in place when self is realized.

        Basic indices with steps of +-1 write through a view; other indices rewrite the whole tensor with a select.
        Raises TypeError when v's dtype differs from self's (Python values are cast).
        """
        cls = type(self)

        value = v if isinstance(v, cls) else cls(v, device=self.device, dtype=self.dtype)
        if value.dtype != self.dtype:
            raise TypeError(f"setitem: value dtype {value.dtype} does not match the target's {self.dtype}")
        if value.device != self.device:
            raise ValueError(f"setitem: value on {value.device} but target on {self.device}; use .to() first")
        if self.uop.base.op is not Ops.BUFFER:
            self.realize()  # settle pending writes; a lazy value gets memory to write into
        if self.uop.base.op is Ops.BUFFER and not self._is_advanced_index(indices) and has_unit_steps(indices):
            view = self[indices]
            view.assign(broadcast_to(value, view.shape, "setitem"))
            return
        self.assign(self._index_put(indices, value))

    def _index_put(self: Tensor, indices: Any, value: Tensor) -> Tensor:
        """self with the elements `self[indices]` replaced by value (broadcast); duplicate indices: the last wins."""
        basic, tensors = split_index(self, indices)
        view = self[tuple(basic)]
        if tensors:
            new, hit = put_tensor_indexed(view, tensors, value)
        else:
            new = broadcast_to(value, view.shape, "setitem")
            hit = type(self).full(view.shape, True, dtype=dtypes.bool, device=self.device)
        return unindex_basic(hit, basic, self.shape).where(unindex_basic(new, basic, self.shape), self)
