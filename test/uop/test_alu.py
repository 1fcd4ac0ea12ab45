"""Tests for fusegrad/uop/alu.py: exec_alu gives every ALU op its C meaning on Python values."""

from __future__ import annotations

import math
import struct

import pytest

from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import cdiv, cmod
from fusegrad.uop import Ops
from fusegrad.uop.alu import exec_alu


def f32(x: float) -> float:
    """x rounded to the nearest float32, as C would store it."""
    return float(struct.unpack("f", struct.pack("f", x))[0])


class TestIntegerDivision:
    @pytest.mark.parametrize(
        ("x", "y", "quotient", "remainder"),
        [(7, 2, 3, 1), (-7, 2, -3, -1), (7, -2, -3, 1), (-7, -2, 3, -1), (6, 3, 2, 0), (-6, 3, -2, 0), (1, 5, 0, 1),
         (-1, 5, 0, -1)],
    )  # fmt: skip
    def test_truncates_toward_zero(self, x: int, y: int, quotient: int, remainder: int) -> None:
        assert exec_alu(Ops.IDIV, dtypes.int, (x, y)) == quotient
        assert exec_alu(Ops.MOD, dtypes.int, (x, y)) == remainder
        assert quotient * y + remainder == x  # C's identity

    def test_matches_c_helpers_over_a_grid(self) -> None:
        for x in range(-20, 21):
            for y in [*range(-7, 0), *range(1, 8)]:
                q, r = cdiv(x, y), cmod(x, y)
                assert q == int(x / y)
                assert q * y + r == x
                assert abs(r) < abs(y)
                assert r == 0 or (r < 0) == (x < 0)

    def test_index_dtype_uses_the_same_rules(self) -> None:
        assert exec_alu(Ops.IDIV, dtypes.index, (-9, 4)) == -2
        assert exec_alu(Ops.MOD, dtypes.index, (-9, 4)) == -1


class TestWrapAround:
    @pytest.mark.parametrize(
        ("op", "dtype", "operands", "expected"),
        [
            (Ops.ADD, dtypes.int8, (127, 1), -128),
            (Ops.ADD, dtypes.uint8, (255, 1), 0),
            (Ops.MUL, dtypes.uint8, (16, 16), 0),
            (Ops.MUL, dtypes.int16, (256, 128), -32768),
            (Ops.ADD, dtypes.uint16, (0, -1), 65535),
            (Ops.ADD, dtypes.int32, (2**31 - 1, 1), -(2**31)),
            (Ops.ADD, dtypes.uint32, (0, -1), 2**32 - 1),
            (Ops.MUL, dtypes.int64, (2**62, 4), 0),
            (Ops.ADD, dtypes.uint64, (2**64 - 1, 2), 1),
            (Ops.SHL, dtypes.uint8, (1, 8), 0),
            (Ops.SHL, dtypes.int32, (1, 31), -(2**31)),
            (Ops.NEG, dtypes.int8, (-128,), -128),
        ],
    )
    def test_results_wrap_at_the_width(self, op: Ops, dtype: DType, operands: tuple[int, ...], expected: int) -> None:
        assert exec_alu(op, dtype, operands) == expected

    def test_no_wrap_within_range(self) -> None:
        assert exec_alu(Ops.ADD, dtypes.int8, (100, 27)) == 127
        assert exec_alu(Ops.SUB, dtypes.uint8, (5, 3)) == 2


class TestFloat:
    def test_float32_results_are_rounded(self) -> None:
        got = exec_alu(Ops.ADD, dtypes.float32, (0.1, 0.2))
        assert got == f32(f32(0.1) + f32(0.2))
        assert got != 0.1 + 0.2
        assert exec_alu(Ops.ADD, dtypes.float64, (0.1, 0.2)) == 0.1 + 0.2
        assert exec_alu(Ops.MUL, dtypes.float32, (1 / 3, 3.0)) == f32(f32(1 / 3) * 3.0)

    def test_float32_overflow_gives_inf(self) -> None:
        assert exec_alu(Ops.MUL, dtypes.float32, (3.0e38, 10.0)) == math.inf
        assert exec_alu(Ops.MUL, dtypes.float32, (-3.0e38, 10.0)) == -math.inf
        assert exec_alu(Ops.ADD, dtypes.float16, (65504.0, 100.0)) == math.inf

    @pytest.mark.parametrize(
        ("x", "y", "expected"),
        [(1.0, 0.0, math.inf), (-1.0, 0.0, -math.inf), (1.0, -0.0, -math.inf), (-1.0, -0.0, math.inf)],
    )
    def test_ieee_division_by_zero(self, x: float, y: float, expected: float) -> None:
        assert exec_alu(Ops.FDIV, dtypes.float, (x, y)) == expected

    def test_zero_over_zero_is_nan(self) -> None:
        assert math.isnan(exec_alu(Ops.FDIV, dtypes.float, (0.0, 0.0)))
        assert math.isnan(exec_alu(Ops.FDIV, dtypes.float, (math.nan, 0.0)))

    def test_reciprocal_of_zero_keeps_the_sign(self) -> None:
        assert exec_alu(Ops.RECIPROCAL, dtypes.float, (0.0,)) == math.inf
        assert exec_alu(Ops.RECIPROCAL, dtypes.float, (-0.0,)) == -math.inf
        assert exec_alu(Ops.RECIPROCAL, dtypes.float, (4.0,)) == 0.25

    def test_log2(self) -> None:
        assert exec_alu(Ops.LOG2, dtypes.float, (0.0,)) == -math.inf
        assert exec_alu(Ops.LOG2, dtypes.float, (-0.0,)) == -math.inf
        assert math.isnan(exec_alu(Ops.LOG2, dtypes.float, (-1.0,)))
        assert exec_alu(Ops.LOG2, dtypes.float, (8.0,)) == 3.0
        assert exec_alu(Ops.LOG2, dtypes.float, (math.inf,)) == math.inf

    def test_sqrt(self) -> None:
        assert math.isnan(exec_alu(Ops.SQRT, dtypes.float, (-1.0,)))
        assert exec_alu(Ops.SQRT, dtypes.float, (9.0,)) == 3.0
        assert exec_alu(Ops.SQRT, dtypes.float, (math.inf,)) == math.inf

    def test_exp2_overflow_gives_inf(self) -> None:
        assert exec_alu(Ops.EXP2, dtypes.float, (200.0,)) == math.inf
        assert exec_alu(Ops.EXP2, dtypes.float64, (2000.0,)) == math.inf
        assert exec_alu(Ops.EXP2, dtypes.half, (20.0,)) == math.inf
        assert exec_alu(Ops.EXP2, dtypes.float, (-math.inf,)) == 0.0

    def test_sin_of_infinity_is_nan(self) -> None:
        assert math.isnan(exec_alu(Ops.SIN, dtypes.float, (math.inf,)))
        assert exec_alu(Ops.SIN, dtypes.float64, (0.0,)) == 0.0

    def test_trunc(self) -> None:
        assert exec_alu(Ops.TRUNC, dtypes.float, (-2.5,)) == -2.0
        assert exec_alu(Ops.TRUNC, dtypes.float, (2.9,)) == 2.0
        assert exec_alu(Ops.TRUNC, dtypes.float, (math.inf,)) == math.inf

    def test_pow(self) -> None:
        assert exec_alu(Ops.POW, dtypes.float, (2.0, 3.0)) == 8.0
        assert math.isnan(exec_alu(Ops.POW, dtypes.float, (-8.0, 1 / 3)))  # no real root: C's pow gives NaN
        assert exec_alu(Ops.POW, dtypes.float64, (10.0, 400.0)) == math.inf

    def test_pow_ieee_edge_cases(self) -> None:
        assert exec_alu(Ops.POW, dtypes.float64, (0.0, -1.0)) == math.inf
        assert exec_alu(Ops.POW, dtypes.float64, (-0.0, -1.0)) == -math.inf
        assert exec_alu(Ops.POW, dtypes.float64, (-10.0, 401.0)) == -math.inf

    def test_nan_propagates_through_max(self) -> None:
        assert math.isnan(exec_alu(Ops.MAX, dtypes.float, (math.nan, 1.0)))
        assert math.isnan(exec_alu(Ops.MAX, dtypes.float, (1.0, math.nan)))


class TestOther:
    def test_comparisons_return_bool(self) -> None:
        assert exec_alu(Ops.CMPLT, dtypes.bool, (1, 2)) is True
        assert exec_alu(Ops.CMPNE, dtypes.bool, (2, 2)) is False
        assert exec_alu(Ops.CMPEQ, dtypes.bool, (2.0, 2)) is True
        assert exec_alu(Ops.CMPNE, dtypes.bool, (math.nan, math.nan)) is True

    def test_where_and_mulacc(self) -> None:
        assert exec_alu(Ops.WHERE, dtypes.int, (True, 1, 2)) == 1
        assert exec_alu(Ops.WHERE, dtypes.int, (False, 1, 2)) == 2
        assert exec_alu(Ops.MULACC, dtypes.int, (3, 4, 5)) == 17

    def test_bitwise(self) -> None:
        assert exec_alu(Ops.AND, dtypes.int, (0b1100, 0b1010)) == 0b1000
        assert exec_alu(Ops.OR, dtypes.int, (0b1100, 0b1010)) == 0b1110
        assert exec_alu(Ops.XOR, dtypes.int, (0b1100, 0b1010)) == 0b0110
        assert exec_alu(Ops.SHR, dtypes.int, (-8, 1)) == -4  # arithmetic shift for signed ints
        assert exec_alu(Ops.XOR, dtypes.bool, (True, True)) is False

    def test_vector_dtypes_work_lane_by_lane(self) -> None:
        assert exec_alu(Ops.ADD, dtypes.int.vec(2), ((1, 2), (3, 4))) == (4, 6)
        assert exec_alu(Ops.MUL, dtypes.int.vec(3), ((1, 2, 3), 2)) == (2, 4, 6)  # a scalar broadcasts
        assert exec_alu(Ops.ADD, dtypes.int8.vec(2), ((127, 0), (1, 1))) == (-128, 1)

    def test_truncate_output_can_be_disabled(self) -> None:
        assert exec_alu(Ops.ADD, dtypes.int8, (127, 1), truncate_output=False) == 128

    def test_op_without_meaning_raises(self) -> None:
        with pytest.raises(NotImplementedError, match="LOAD"):
            exec_alu(Ops.LOAD, dtypes.int, (1,))
