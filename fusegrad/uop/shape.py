"""Shapes and devices of tensor-level UOps, and the checks that keep movement ops valid.

`compute_shape(u)` and `compute_device(u)` are evaluated bottom-up by `UOp._cached` (sources first), so they only look
at their sources' cached values. Kernel-level nodes (RANGE, INDEX, …) have no shape: None.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from fusegrad.helpers import prod
from fusegrad.uop import GroupOp, Ops
from fusegrad.uop.symbolic_shape import at_bound, simplify_size

if TYPE_CHECKING:
    from fusegrad.uop.ops import UOp

Shape = tuple[int, ...]


def _src_shape(u: UOp, i: int = 0) -> Shape | None:
    return u.src[i].__dict__["_shape"]  # type: ignore[no-any-return]  # set by UOp._cached before users ask


def _elementwise_shape(u: UOp) -> Shape | None:
    shapes = [s.__dict__["_shape"] for s in u.src]
    shapes = [s for s in shapes if s is not None]
    if not shapes:
        return None
    if any(s != shapes[0] for s in shapes[1:]):
        raise ValueError(f"{u.op.name.lower()}: sources have different shapes {shapes}; broadcast them first")
    return shapes[0]  # type: ignore[no-any-return]


# symbolic sizes (symbolic_shape.py) are checked at their bound values; inside the scheduler, where the values are
# stripped, they were checked when the graph was built
def _sizes_differ(x: Any, y: Any) -> bool:
    if isinstance(x, int) and isinstance(y, int):
        return x != y
    a, b = at_bound(x), at_bound(y)
    return a is not None and b is not None and a != b


def _in_order(*xs: Any) -> bool:
    """xs[0] <= xs[1] <= ..., checked among the sizes that have a value (a chain: skipping one keeps it sound)."""
    known = [v for v in (at_bound(x) for x in xs) if v is not None]
    return all(a <= b for a, b in itertools.pairwise(known))


def _simplified(sizes: tuple[Any, ...]) -> Shape:
    """`sizes` as a shape, symbolic ones folded: `0+i` and `i` must be one node, or equal shapes would differ."""
    if all(type(s) is int for s in sizes):
        return tuple(sizes)
    return tuple(simplify_size(s) for s in sizes)  # type: ignore[misc]  # sizes may be symbolic: Shape says int


def _plus(x: Any, y: Any) -> Any:
    """x + y without a `+ 0` node when one side is the int 0 (a symbolic size stays the same node)."""
    if isinstance(y, int) and y == 0:
        return x
    if isinstance(x, int) and x == 0:
        return y
    return x + y


def movement_shape(op: Ops, in_shape: Shape, arg: Any) -> Shape:  # noqa: C901  # one case per op: a dispatch table
    """The output shape of a movement op, checking its argument against the input shape."""
    match op:
        case Ops.RESHAPE:
            if _sizes_differ(prod(arg), prod(in_shape)):
                raise ValueError(
                    f"reshape: cannot reshape {in_shape} ({prod(in_shape)} elements) to {arg} ({prod(arg)} elements)"
                )
            return _simplified(arg)
        case Ops.PERMUTE:
            if sorted(arg) != list(range(len(in_shape))):
                raise ValueError(f"permute: order {arg} is not a permutation of the {len(in_shape)} axes of {in_shape}")
            return tuple(in_shape[i] for i in arg)
        case Ops.EXPAND:
            new = _simplified(arg)
            if len(new) != len(in_shape) or any(s != n and s != 1 for s, n in zip(in_shape, new, strict=True)):
                raise ValueError(f"expand: cannot expand {in_shape} to {arg}: only size-1 axes can grow")
            return new
        case Ops.PAD:
            if len(arg) != len(in_shape) or any(not _in_order(0, b) or not _in_order(0, a) for b, a in arg):
                raise ValueError(
                    f"pad: padding {arg} does not fit {in_shape}: expected one non-negative (before, after) per axis"
                )
            padded = (simplify_size(_plus(_plus(s, b), a)) for s, (b, a) in zip(in_shape, arg, strict=True))
            return tuple(padded)  # type: ignore[arg-type]  # sizes may be symbolic (UOps): Shape says int for now
        case Ops.SHRINK:
            if len(arg) != len(in_shape) or not all(_in_order(0, *b, s) for s, b in zip(in_shape, arg, strict=True)):
                raise ValueError(
                    f"shrink: bounds {arg} do not fit {in_shape}: expected 0 <= start <= end <= size per axis"
                )
            kept = (simplify_size(e) if isinstance(b, int) and b == 0 else simplify_size(e - b) for b, e in arg)
            return tuple(kept)  # type: ignore[arg-type]  # sizes may be symbolic (UOps): Shape says int for now
        case Ops.FLIP:
            if len(arg) != len(in_shape):
                raise ValueError(f"flip: expected one flag per axis of {in_shape}, got {arg}")
            return in_shape
    raise ValueError(f"movement_shape: {op} is not a movement op")


def compute_shape(u: UOp) -> Shape | None:
    """The tensor shape of `u`, or None for nodes without one."""
    match u.op:
        case Ops.BUFFER | Ops.IOTA:
            return (u.arg,)
        case Ops.CONST:
            return () if u.src else None  # a tensor constant has a DEVICE source; a kernel constant has none
        case Ops.DEFINE_VAR | Ops.BIND:
            return ()
        case Ops.REDUCE_AXIS:
            shape = _src_shape(u)
            assert shape is not None, "REDUCE_AXIS needs a shaped source"
            return tuple(1 if i in u.arg[1] else s for i, s in enumerate(shape))
        case Ops.ASSIGN | Ops.AFTER | Ops.COPY | Ops.CONTIGUOUS | Ops.CONTIGUOUS_BACKWARD | Ops.DETACH:
            return _src_shape(u)
        case Ops.CAST | Ops.BITCAST:
            return _src_shape(u)
        case Ops.KERNEL | Ops.SINK | Ops.DEVICE | Ops.UNIQUE:
            return None
    if u.op in GroupOp.Movement:
        shape = _src_shape(u)
        assert shape is not None, f"{u.op} needs a shaped source"
        return movement_shape(u.op, shape, u.arg)
    if u.op in GroupOp.ALU:
        return _elementwise_shape(u)
    return None


def compute_device(u: UOp) -> str | tuple[str, ...] | None:
    """The device `u` lives on: from its DEVICE source, or inherited from its first source that has one."""
    if u.op is Ops.DEVICE:
        return u.arg  # type: ignore[no-any-return]
    if u.op is Ops.COPY:
        return u.src[1].arg  # type: ignore[no-any-return]
    if u.op is Ops.BUFFER:
        return u.src[1].arg  # type: ignore[no-any-return]
    if u.op is Ops.IOTA:
        return u.src[0].arg  # type: ignore[no-any-return]
    for s in u.src:
        if (d := s.__dict__["_device"]) is not None:
            return d  # type: ignore[no-any-return]
    return None
