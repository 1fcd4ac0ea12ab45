"""What every ALU op and value cast means on Python values: what constant folding, the PYTHON device and the C
renderer's guards all follow (docs/KERNEL_IR.md §5 "Defined semantics").

Integer division and modulo truncate toward zero, integers wrap at their width, floats follow IEEE-754 (division by
zero gives inf/nan, never an exception) and float32/float16 results are rounded to their width. Where C leaves a
result undefined, numpy's result on x86 is the definition: x // 0 and x % 0 are 0, INT_MIN // -1 wraps to INT_MIN
(and INT_MIN % -1 is 0), shifts by a count outside [0, bits) give 0 (or -1 for a negative value shifted right), and
a float converts to an int as `float_to_int` says. MULACC on floats is IEEE's fusedMultiplyAdd: x*y + z rounded once
(C's fmaf/fma), which `fused_multiply_add` computes exactly.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from fusegrad.dtype import ConstType, DType, dtypes, truncate
from fusegrad.helpers import cdiv, cmod
from fusegrad.uop import Ops


def _cvtt(x: float, bits: int) -> int:
    """x86's cvttss2si/cvttsd2si to a `bits`-wide int: truncation toward zero, or the "integer indefinite" value
    -2**(bits-1) for NaN, inf and anything that does not fit."""
    lo = -(1 << (bits - 1))
    return math.trunc(x) if lo <= x < -lo else lo  # NaN fails both comparisons


def float_to_int(x: float, dt: DType) -> int:
    """A float converted to int dtype `dt` as numpy does on x86 (C leaves NaN, inf and out-of-range undefined):
    int32 and int64 (and index) take `_cvtt` at their width; int8/int16/uint8/uint16 take the int32 result wrapped to
    their width; uint32 the int64 result wrapped (numpy's scalar loop; its SIMD loop differs out of range); uint64 the
    int64 result wrapped below 2**63, trunc(x) in [2**63, 2**64) and 0 from 2**64 on (NaN counts as below)."""
    scalar = dt.scalar()
    if scalar in (dtypes.int64, dtypes.index):
        return _cvtt(x, 64)
    if scalar == dtypes.uint64:
        if x >= 2**63:
            return math.trunc(x) if x < 2**64 else 0
        return _cvtt(x, 64) & (2**64 - 1)
    if scalar == dtypes.uint32:
        return _cvtt(x, 64) & (2**32 - 1)
    return int(truncate[scalar](_cvtt(x, 32)))


def _shl(x: int, y: int, bits: int = 64) -> int:
    return int(x) << int(y) if 0 <= y < bits else 0


def _shr(x: int, y: int, bits: int = 64) -> int:
    if 0 <= y < bits:
        return int(x) >> int(y)
    return -1 if x < 0 else 0  # numpy: every bit shifted out, the sign bit shifted in


def _exp2(x: float) -> float:
    try:
        return math.pow(2.0, x)
    except OverflowError:
        return math.inf


def _log2(x: float) -> float:
    if x > 0:
        return math.log2(x)
    return -math.inf if x == 0 else math.nan


def _sin(x: float) -> float:
    return math.sin(x) if math.isfinite(x) else math.nan


def _sqrt(x: float) -> float:
    return math.sqrt(x) if x >= 0 else math.nan


def _reciprocal(x: float) -> float:
    return 1.0 / x if x != 0 else math.copysign(math.inf, x)


def _fdiv(x: float, y: float) -> float:
    if y != 0:
        return x / y
    if x == 0 or math.isnan(x):
        return math.nan
    return math.copysign(math.inf, x) * math.copysign(1.0, y)


def _pow(x: float, y: float) -> float:
    try:
        return math.pow(x, y)
    except OverflowError:  # |result| too big: negative only for a negative base and an odd integer power
        return -math.inf if x < 0 and float(y).is_integer() and int(y) % 2 else math.inf
    except ValueError:
        if x == 0 and y < 0:  # a pole: inf, with the sign of the zero for odd integer powers (C's pow)
            odd = float(y).is_integer() and int(y) % 2 == 1
            return math.copysign(math.inf, x) if odd else math.inf
        return math.nan


def _trunc(x: float) -> float:
    return float(math.trunc(x)) if math.isfinite(x) else x


def _round_to_odd_fma(x: float, y: float, z: float) -> float:
    """x*y + z rounded to odd in a double, for operands of at most 26 significant bits (float32 and narrower): their
    product is exact in a double, TwoSum gives the sum's exact rounding error, and a double rounded to odd rounds to
    any format of at most 51 bits as the exact value would (no double rounding: Boldo & Melquiond)."""
    product = x * y  # exact
    total = product + z
    if not math.isfinite(total):
        return total  # inf or nan operands: what IEEE's fma gives (the product cannot overflow a double)
    z_part = total - product
    error = (product - (total - z_part)) + (z - z_part)  # TwoSum: total + error == product + z exactly
    if error == 0 or struct.unpack("<q", struct.pack("<d", total))[0] & 1:
        return total
    return math.nextafter(total, math.copysign(math.inf, error))  # the odd neighbour, on the exact value's side


def _exact_fma(x: float, y: float, z: float) -> float:
    """x*y + z rounded once to a double, by exact rational arithmetic (math.fma is Python 3.13+)."""
    if not (math.isfinite(x) and math.isfinite(y)):
        return x * y + z  # an inf or nan product is exact, and the add follows IEEE
    if not math.isfinite(z):
        return z  # finite + inf is inf, + nan is nan (x*y + z in doubles could overflow to inf - inf = nan)
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact == 0:
        # zero operands add as IEEE zeros do (-0 only for -0 + -0); a cancellation is +0 in round-to-nearest
        return x * y + z if x == 0 or y == 0 else 0.0
    try:
        return float(exact)  # int / int is correctly rounded (to nearest even), subnormals and underflow included
    except OverflowError:  # raised only when the rounded value overflows
        return math.inf if exact > 0 else -math.inf


def fused_multiply_add(x: float, y: float, z: float, dtype: DType) -> float:
    """IEEE fusedMultiplyAdd of float `dtype` values: x*y + z with one rounding, to a double here (exec_alu rounds it
    to `dtype`): exact rationals for float64, a double rounded to odd for float32 and narrower."""
    if dtype.scalar().itemsize == 8:
        return _exact_fma(x, y, z)
    return _round_to_odd_fma(x, y, z)


python_alu: dict[Ops, Callable[..., Any]] = {
    Ops.NEG: lambda x: (not x) if isinstance(x, bool) else -x,
    Ops.EXP2: _exp2,
    Ops.LOG2: _log2,
    Ops.SIN: _sin,
    Ops.SQRT: _sqrt,
    Ops.RECIPROCAL: _reciprocal,
    Ops.TRUNC: _trunc,
    Ops.ADD: lambda x, y: x + y,
    Ops.SUB: lambda x, y: x - y,
    Ops.MUL: lambda x, y: x * y,
    Ops.IDIV: cdiv,
    Ops.MOD: cmod,
    Ops.FDIV: _fdiv,
    Ops.POW: _pow,
    Ops.MAX: lambda x, y: x if x > y or x != x else y,  # NaN on either side propagates; max(-0.0, 0.0) is 0.0
    Ops.CMPLT: lambda x, y: x < y,
    Ops.CMPNE: lambda x, y: x != y,
    Ops.CMPEQ: lambda x, y: x == y,
    Ops.XOR: lambda x, y: x ^ y,
    Ops.OR: lambda x, y: x | y,
    Ops.AND: lambda x, y: x & y,
    Ops.SHL: _shl,  # exec_alu passes the dtype's width
    Ops.SHR: _shr,
    Ops.WHERE: lambda c, x, y: x if c else y,
    Ops.MULACC: lambda x, y, z: x * y + z,  # ints (wrapped by exec_alu); floats take fused_multiply_add
}


def exec_alu(op: Ops, dtype: DType, operands: tuple[Any, ...] | list[Any], truncate_output: bool = True) -> Any:
    """Apply `op` to Python values as a kernel would for `dtype` (vector dtypes take tuples, lane by lane)."""
    if dtype.count > 1:
        lanes = [tuple(x[i] if isinstance(x, tuple) else x for x in operands) for i in range(dtype.count)]
        return tuple(exec_alu(op, dtype.scalar(), lane, truncate_output) for lane in lanes)
    if op in (Ops.SHL, Ops.SHR):
        ret: Any = python_alu[op](*operands, bits=min(dtype.scalar().bitsize, 64))
    elif op is Ops.MULACC and dtypes.is_float(dtype):
        x, y, z = (float(v) for v in operands)
        ret = fused_multiply_add(x, y, z, dtype)
    elif op not in python_alu:
        raise NotImplementedError(f"exec_alu: no Python meaning for {op}")
    else:
        if dtypes.is_int(dtype) and op in (Ops.ADD, Ops.MUL, Ops.SUB, Ops.IDIV, Ops.MOD, Ops.MAX):
            operands = [int(x) for x in operands]
        ret = python_alu[op](*operands)
    if not truncate_output or op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
        return ret
    return truncate.get(dtype.scalar(), _identity)(ret)


def _identity(x: ConstType) -> ConstType:
    return x
