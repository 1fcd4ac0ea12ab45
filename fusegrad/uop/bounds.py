"""Value bounds (`vmin`, `vmax`) of a UOp from those of its sources: what div/mod folding and `resolve` rely on.

`compute_bounds(u)` is called bottom-up by `UOp._cached`, so each source already holds its bounds in `_bounds`.
Bounds are sound (every reachable value lies inside) but not always tight.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from fusegrad.dtype import ConstType, DType, InvalidType, PtrDType, dtypes, truncate
from fusegrad.helpers import cdiv
from fusegrad.uop import Ops

if TYPE_CHECKING:
    from fusegrad.uop.ops import UOp

Bounds = tuple[ConstType, ConstType]


def _b(u: UOp) -> Bounds:
    return u.__dict__["_bounds"]  # type: ignore[no-any-return]  # set by UOp._cached before users ask


def dtype_bounds(dt: DType) -> Bounds:
    scalar = dt.scalar()
    if scalar == dtypes.index:
        return -(2**63), 2**63 - 1
    if scalar == dtypes.void or isinstance(dt, PtrDType):
        return -math.inf, math.inf  # no value: bounds say nothing
    return dtypes.min(scalar), dtypes.max(scalar)


def _fits(lo: Any, hi: Any, dt: DType) -> bool:
    dlo, dhi = dtype_bounds(dt)
    return bool(dlo <= lo and hi <= dhi)


def _add(a: Bounds, b: Bounds) -> Bounds:
    return a[0] + b[0], a[1] + b[1]


def _mul(a: Bounds, b: Bounds) -> Bounds:
    corners = [x * y for x in a for y in b]
    if any(isinstance(c, float) and math.isnan(c) for c in corners):  # 0*inf
        return -math.inf, math.inf
    return min(corners), max(corners)


def _idiv(a: Bounds, b: Bounds) -> Bounds | None:
    if b[0] <= 0 <= b[1]:
        return None  # the divisor may be 0 (or change sign): nothing useful to say
    corners = [cdiv(int(x), int(y)) for x in a for y in b]
    return min(corners), max(corners)


def _mod(a: Bounds, b: Bounds) -> Bounds | None:
    if b[0] <= 0 <= b[1]:
        return None
    m = max(abs(int(b[0])), abs(int(b[1]))) - 1  # |x % y| < |y|, and the sign follows x
    if a[0] >= 0:
        return (a[0], a[1]) if a[1] <= min(abs(int(b[0])), abs(int(b[1]))) - 1 else (0, min(a[1], m))
    if a[1] <= 0:
        return max(a[0], -m), 0
    return max(a[0], -m), min(a[1], m)


def _shift(op: Ops, a: Bounds, b: Bounds, bits: int) -> Bounds | None:
    if b[0] != b[1] or b[0] < 0 or a[0] < 0:
        return None
    k = int(b[0])
    if k >= bits:  # a count past the width gives the defined 0; a << k would build a k-bit Python int (k up to 2**64)
        return None
    return (int(a[0]) << k, int(a[1]) << k) if op is Ops.SHL else (int(a[0]) >> k, int(a[1]) >> k)


def _logic(op: Ops, a: Bounds, b: Bounds, is_bool: bool) -> Bounds | None:
    if is_bool:
        if op is Ops.AND:
            return bool(a[0] and b[0]), bool(a[1] and b[1])
        if op is Ops.OR:
            return bool(a[0] or b[0]), bool(a[1] or b[1])
        return None
    if op is Ops.AND and a[0] >= 0 and b[0] >= 0:
        return 0, min(a[1], b[1])
    if op in (Ops.OR, Ops.XOR) and a[0] >= 0 and b[0] >= 0:
        return 0, (1 << int(max(a[1], b[1])).bit_length()) - 1
    return None


def _compare(op: Ops, a: Bounds, b: Bounds) -> Bounds:
    if op is Ops.CMPLT:
        return bool(a[1] < b[0]), bool(a[0] < b[1])
    disjoint = bool(a[1] < b[0] or b[1] < a[0])
    same_point = bool(a[0] == a[1] == b[0] == b[1])
    if op is Ops.CMPNE:
        return disjoint, not same_point
    return same_point, not disjoint


def _binary(u: UOp) -> Bounds | None:
    a, b = _b(u.src[0]), _b(u.src[1])
    match u.op:
        case Ops.ADD:
            return _add(a, b)
        case Ops.SUB:
            return a[0] - b[1], a[1] - b[0]
        case Ops.MUL:
            return _mul(a, b)
        case Ops.MAX:
            return max(a[0], b[0]), max(a[1], b[1])
        case Ops.IDIV:
            return _idiv(a, b) if dtypes.is_int(u.dtype) else None
        case Ops.MOD:
            return _mod(a, b) if dtypes.is_int(u.dtype) else None
        case Ops.CMPLT | Ops.CMPNE | Ops.CMPEQ:
            return _compare(u.op, a, b)
        case Ops.SHL | Ops.SHR:
            return _shift(u.op, a, b, u.dtype.scalar().itemsize * 8) if dtypes.is_int(u.dtype) else None
        case Ops.AND | Ops.OR | Ops.XOR:
            return _logic(u.op, a, b, u.dtype.scalar() == dtypes.bool)
    return None


def _leaf_or_unary(u: UOp) -> Bounds | None:  # noqa: C901  # one case per op: a dispatch table
    match u.op:
        case Ops.CONST:
            return None if isinstance(u.arg, InvalidType) else (u.arg, u.arg)
        case Ops.VCONST:
            return min(u.arg), max(u.arg)
        case Ops.DEFINE_VAR:
            return u.arg[1], u.arg[2]
        case Ops.RANGE:
            end = _b(u.src[0])
            return 0, end[1] - 1
        case Ops.SPECIAL:
            return (0, u.src[0].vmax - 1) if u.src else None
        case Ops.BIND | Ops.ASSIGN:
            return _b(u.src[0])
        case Ops.VECTORIZE:
            bs = [_b(s) for s in u.src]
            return min(x[0] for x in bs), max(x[1] for x in bs)
        case Ops.GEP:
            return _b(u.src[0])
        case Ops.CAST:
            src = _b(u.src[0])
            if dtypes.is_int(u.dtype) and dtypes.is_float(u.src[0].dtype):
                return None
            if dtypes.is_float(u.dtype) and u.dtype.scalar() in truncate:  # rounding is monotone: 2**31-1 -> 2**31
                return truncate[u.dtype.scalar()](src[0]), truncate[u.dtype.scalar()](src[1])
            return src if _fits(src[0], src[1], u.dtype) else None
        case Ops.NEG:
            src = _b(u.src[0])
            return -src[1], -src[0]
        case Ops.WHERE:
            cond, x, y = _b(u.src[0]), _b(u.src[1]), _b(u.src[2])
            if cond[0] == cond[1]:
                return x if cond[0] else y
            return min(x[0], y[0]), max(x[1], y[1])
    return None


def compute_bounds(u: UOp) -> Bounds:
    """(vmin, vmax) of `u`; falls back to the dtype's full range."""
    ret = _binary(u) if len(u.src) == 2 and u.op not in (Ops.BIND, Ops.VECTORIZE, Ops.ASSIGN) else None
    if ret is None:
        ret = _leaf_or_unary(u)
    if ret is None or (not isinstance(ret[0], bool) and not _fits(ret[0], ret[1], u.dtype)):
        return dtype_bounds(u.dtype)
    if u.dtype.scalar() == dtypes.bool:
        return bool(ret[0]), bool(ret[1])
    return ret
