"""What every ALU op means on Python values, with C semantics: what constant folding and the PYTHON device use.

Integer division and modulo truncate toward zero, integers wrap at their width, floats follow IEEE-754 (division by
zero gives inf/nan, never an exception) and float32/float16 results are rounded to their width.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from fusegrad.dtype import ConstType, DType, dtypes, truncate
from fusegrad.uop import Ops


def c_idiv(x: int, y: int) -> int:
    """C integer division (toward zero); division by zero is undefined in C and gives 0 here."""
    if y == 0:
        return 0
    q = abs(x) // abs(y)
    return -q if (x < 0) != (y < 0) else q


def c_mod(x: int, y: int) -> int:
    """C remainder: takes the sign of the dividend, so x == c_idiv(x, y)*y + c_mod(x, y)."""
    return 0 if y == 0 else x - c_idiv(x, y) * y


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


def _shl(x: int, y: int) -> int:
    return int(x) << int(y)


def _shr(x: int, y: int) -> int:
    return int(x) >> int(y)


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
    Ops.IDIV: c_idiv,
    Ops.MOD: c_mod,
    Ops.FDIV: _fdiv,
    Ops.POW: _pow,
    Ops.MAX: lambda x, y: x if x > y or x != x else y,  # NaN on either side propagates; max(-0.0, 0.0) is 0.0
    Ops.CMPLT: lambda x, y: x < y,
    Ops.CMPNE: lambda x, y: x != y,
    Ops.CMPEQ: lambda x, y: x == y,
    Ops.XOR: lambda x, y: x ^ y,
    Ops.OR: lambda x, y: x | y,
    Ops.AND: lambda x, y: x & y,
    Ops.SHL: _shl,
    Ops.SHR: _shr,
    Ops.WHERE: lambda c, x, y: x if c else y,
    Ops.MULACC: lambda x, y, z: x * y + z,
}


def exec_alu(op: Ops, dtype: DType, operands: tuple[Any, ...] | list[Any], truncate_output: bool = True) -> Any:
    """Apply `op` to Python values as a kernel would for `dtype` (vector dtypes take tuples, lane by lane)."""
    if dtype.count > 1:
        lanes = [tuple(x[i] if isinstance(x, tuple) else x for x in operands) for i in range(dtype.count)]
        return tuple(exec_alu(op, dtype.scalar(), lane, truncate_output) for lane in lanes)
    if op not in python_alu:
        raise NotImplementedError(f"exec_alu: no Python meaning for {op}")
    if dtypes.is_int(dtype) and op in (Ops.ADD, Ops.MUL, Ops.SUB, Ops.IDIV, Ops.MOD, Ops.MAX):
        operands = [int(x) for x in operands]
    ret = python_alu[op](*operands)
    if not truncate_output or op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
        return ret
    return truncate.get(dtype.scalar(), _identity)(ret)


def _identity(x: ConstType) -> ConstType:
    return x
