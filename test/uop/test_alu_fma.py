"""Tests for MULACC in fusegrad/uop/alu.py: exec_alu's fused multiply-add rounds x*y + z once, bit for bit what C's
fmaf / fma (glibc's libm, through ctypes) give, special values and cancellation included."""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import struct
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fusegrad.dtype import dtypes
from fusegrad.uop import Ops
from fusegrad.uop.alu import exec_alu

_LIBM = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
_LIBM.fmaf.restype = ctypes.c_float
_LIBM.fmaf.argtypes = [ctypes.c_float] * 3
_LIBM.fma.restype = ctypes.c_double
_LIBM.fma.argtypes = [ctypes.c_double] * 3

F32_MIN_SUBNORMAL = 2.0**-149
F32_MAX = float(np.finfo(np.float32).max)


def bits32(x: float) -> int:
    """The float32 bits of x (NaNs compared as one bit pattern: C and Python may carry different payloads)."""
    return 0x7FC00000 if math.isnan(x) else struct.unpack("<I", struct.pack("<f", x))[0]


def bits64(x: float) -> int:
    return 0x7FF8000000000000 if math.isnan(x) else struct.unpack("<Q", struct.pack("<d", x))[0]


floats32 = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)
# operands near each other in size, so products and sums cancel and round at their last bits
mantissas32 = st.integers(-(2**24), 2**24).map(lambda m: m * 2.0**-24)


@st.composite
def cancelling32(draw: st.DrawFn) -> tuple[float, float, float]:
    """x, y and z = -(x*y rounded to float32) nudged by a few ulps: the exact result is the product's rounding error."""
    x, y = draw(mantissas32) * 2.0 ** draw(st.integers(-60, 60)), draw(mantissas32)
    z = float(np.float32(-x * y))
    for _ in range(draw(st.integers(0, 2))):
        z = float(np.nextafter(np.float32(z), np.float32(draw(st.sampled_from([-np.inf, np.inf])))))
    return float(np.float32(x)), y, z


def check32(x: float, y: float, z: float) -> None:
    got = exec_alu(Ops.MULACC, dtypes.float32, (x, y, z))
    assert bits32(got) == bits32(_LIBM.fmaf(x, y, z)), f"fmaf({x!r}, {y!r}, {z!r})"


@settings(max_examples=800, deadline=None)
@given(floats32, floats32, floats32)
@example(0.0, -1.0, 0.0)  # +0 * -1 + +0 = +0
@example(-0.0, 1.0, -0.0)  # -0 + -0 = -0
@example(math.inf, 0.0, 1.0)  # inf * 0: nan
@example(math.inf, 1.0, -math.inf)  # inf - inf: nan
@example(F32_MAX, 2.0, -F32_MAX)  # the product overflows float32, the fused sum doesn't
@example(F32_MIN_SUBNORMAL, 0.5, 0.0)  # half the smallest subnormal: a tie, to even (0)
@example(F32_MIN_SUBNORMAL, 1.5, 0.0)  # 1.5 subnormals: a tie, to even (2)
@example(F32_MIN_SUBNORMAL, -0.25, -0.0)  # underflows to -0
@example(1.0 + 2.0**-23, 1.0 - 2.0**-23, -1.0)  # cancellation: -2**-46 exactly
@example(1.0 + 2.0**-12, 1.0 + 2.0**-12, 2.0**-80)  # a double would round to a float32 tie (test below)
def test_float32_matches_fmaf(x: float, y: float, z: float) -> None:
    check32(x, y, z)


@settings(max_examples=400, deadline=None)
@given(cancelling32())
def test_float32_cancellation_matches_fmaf(operands: tuple[float, float, float]) -> None:
    check32(*operands)


@settings(max_examples=400, deadline=None)
@given(mantissas32, mantissas32, mantissas32, st.integers(-40, 40))
def test_float32_near_ties_match_fmaf(x: float, y: float, z: float, shift: int) -> None:
    """z far below the product: the sum lands between float32s, often near a tie that a double would blur."""
    check32(float(np.float32(x)), float(np.float32(y)), float(np.float32(z * 2.0**shift)))


def test_double_rounding_is_avoided() -> None:
    """(1 + 2**-12)**2 = 1 + 2**-11 + 2**-24 is a float32 tie; + 2**-80 puts it a hair above: one rounding goes up,
    rounding to a double first (back onto the tie) and then to float32 (to even) goes down."""
    x, z = 1.0 + 2.0**-12, 2.0**-80
    assert float(np.float32(x * x + z)) != _LIBM.fmaf(x, x, z)  # the naive result is wrong here
    assert exec_alu(Ops.MULACC, dtypes.float32, (x, x, z)) == _LIBM.fmaf(x, x, z)


floats64 = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)


@settings(max_examples=800, deadline=None)
@given(floats64, floats64, floats64)
@example(1e308, 10.0, -math.inf)  # the product overflows a double, the exact sum is -inf
@example(1e308, 10.0, -1e308)  # overflows: inf
@example(2.0**-1074, 0.5, -0.0)  # a tie below the smallest subnormal: to even, +0
@example(-(2.0**-1074), 0.5, 0.0)  # rounds to -0 (the exact value is negative)
@example(1.0 + 2.0**-52, 1.0 - 2.0**-52, -1.0)  # cancellation: -2**-104
@example(0.0, -1.0, -0.0)
def test_float64_matches_fma(x: float, y: float, z: float) -> None:
    got = exec_alu(Ops.MULACC, dtypes.float64, (x, y, z))
    assert bits64(got) == bits64(_LIBM.fma(x, y, z)), f"fma({x!r}, {y!r}, {z!r})"


def _round_half(exact: Fraction) -> float:
    """The float16 nearest to `exact` (ties to even), by brute force over the two neighbours of a candidate."""
    candidate = np.float16(float(exact))
    options = [candidate, np.nextafter(candidate, np.float16(-np.inf)), np.nextafter(candidate, np.float16(np.inf))]
    finite = [h for h in options if np.isfinite(h)]

    def distance(h: np.float16) -> tuple[Fraction, int]:
        return abs(Fraction(float(h)) - exact), int(np.array(h).view(np.uint16)) & 1  # ties: the even one

    return float(min(finite, key=distance))


@settings(max_examples=400, deadline=None)
@given(*[st.floats(width=16, allow_nan=False, allow_infinity=False)] * 3)
def test_float16_rounds_once(x: float, y: float, z: float) -> None:
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if abs(exact) > Fraction(65520):  # rounds to inf
        return
    got = exec_alu(Ops.MULACC, dtypes.float16, (x, y, z))
    assert got == _round_half(exact), f"fma16({x!r}, {y!r}, {z!r})"


@pytest.mark.parametrize(("dtype", "expected"), [(dtypes.int8, -56), (dtypes.int32, 200), (dtypes.uint8, 200)])
def test_ints_wrap(dtype: object, expected: int) -> None:
    assert exec_alu(Ops.MULACC, dtype, (10, 20, 0)) == expected  # type: ignore[arg-type]  # a DType


def test_vectors_go_lane_by_lane() -> None:
    x, y, z = (1.0 + 2.0**-12, 2.0), (1.0 + 2.0**-12, 3.0), (2.0**-80, 1.0)
    got = exec_alu(Ops.MULACC, dtypes.float32.vec(2), (x, y, z))
    assert got == (_LIBM.fmaf(x[0], y[0], z[0]), 7.0)
