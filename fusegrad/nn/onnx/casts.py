"""ONNX Cast and CastLike, and the ONNX element types fusegrad holds in a wider dtype.

The sub-byte types (INT4, UINT4, INT2, UINT2, FLOAT4E2M1) have no fusegrad dtype: a value of one lives in its
container dtype (proto.CONTAINED_TYPES: INT4 in int8, FLOAT4E2M1 in float32) holding only values the type has.
Casts keep that true: to an int type they truncate and wrap to its width (as ml_dtypes and the ONNX reference do),
to FLOAT4E2M1 they round to nearest even and saturate. Float8 casts saturate by default (fusegrad's fp8 cast);
saturate=0 gives infinity (e5m2) or NaN past the largest value instead. Entry point: `cast_to`.
"""

from __future__ import annotations

import math

import onnx

from fusegrad.dtype import FP8_FORMATS, dtypes
from fusegrad.nn.onnx.proto import SUBBYTE_INT_RANGES, dtype_of, onnx_type_of
from fusegrad.nn.onnx.registry import onnx_op
from fusegrad.tensor import Tensor

FLOAT4_MAX = 6.0


def wrap_int(x: Tensor, code: int) -> Tensor:
    """x (truncated toward zero if float) wrapped to the width of a sub-byte int type, in its container dtype."""
    low, high = SUBBYTE_INT_RANGES[code]
    ints = x.cast(dtypes.int32) if dtypes.is_float(x.dtype) else x.cast(dtypes.int64)
    span = high - low + 1
    # two's complement at the narrow width: the low bits, then values past high come around to the negatives
    wrapped = ((ints - low) & (span - 1)) + low
    return wrapped.cast(dtype_of(code, "Cast"))


def round_float4(x: Tensor) -> Tensor:
    """x rounded to FLOAT4E2M1 (values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives), to nearest even, saturating
    at 6; NaN becomes -0 as in ml_dtypes (the type has no NaN)."""
    x = x.cast(dtypes.float32)
    magnitude = x.abs()
    # the grid's spacing: 0.5 below 2, 1 in [2, 4), 2 from 4; a tie rounds to the even multiple, which is the value
    # with an even mantissa
    spacing = (magnitude < 2).where(0.5, (magnitude < 4).where(1.0, 2.0))
    rounded = ((magnitude / spacing).round() * spacing).minimum(FLOAT4_MAX)
    signed = (x < 0).where(-rounded, rounded)
    return x.isnan().where(-0.0, signed)


def overflow_bound(code: int) -> tuple[float, bool]:
    """(|x| where a non-saturating float8 cast leaves the finite values, whether exactly that value overflows): half an
    ulp past the largest value; a tie rounds to even, which is the overflow when the largest mantissa is odd."""
    fmt = FP8_FORMATS[dtype_of(code, "Cast")]
    ulp = 2.0 ** (math.frexp(fmt.max)[1] - 1 - fmt.mantissa_bits)  # the spacing of the values at the largest
    return fmt.max + ulp / 2, int(fmt.max / ulp) % 2 == 1


def cast_fp8_unsaturated(x: Tensor, code: int) -> Tensor:
    """A float8 cast where values past the largest become infinity (e5m2) or NaN (the others), as ONNX's saturate=0."""
    target = dtype_of(code, "Cast")
    fmt = FP8_FORMATS[target]
    bound, tie_overflows = overflow_bound(code)
    magnitude = x.cast(dtypes.float32).abs()
    # (written with < and ==: Tensor's >= is not(<), true for NaN, which must keep its NaN)
    overflow = (magnitude > bound) | (magnitude == bound) if tie_overflows else magnitude > bound
    bits = x.cast(target).bitcast(dtypes.uint8)
    if fmt.has_inf:  # sign | all-ones exponent, zero mantissa
        special = (x < 0).where(0x80, 0).cast(dtypes.uint8) | (0x7F ^ ((1 << fmt.mantissa_bits) - 1))
    else:
        special = Tensor.full_like(bits, fmt.nan_bits)
    return overflow.where(special, bits).bitcast(target)


def round_e8m0(x: Tensor, saturate: bool, round_mode: str) -> Tensor:
    """x as FLOAT8E8M0 (2**-127 .. 2**127 and NaN; no zero), held in float32: the float32 exponent, moved up when the
    mantissa rounds up ("up": any fraction; "nearest": half or more, ties to even; "down": never), NaN for NaN and
    infinity; saturate keeps 2**127 from rounding past the largest."""
    bits = x.cast(dtypes.float32).bitcast(dtypes.uint32)
    exponent = (bits >> 23) & 0xFF
    if round_mode == "up":
        round_up = (bits & 0x7FFFFF) != 0
    elif round_mode == "nearest":  # guard bit set, and a round/sticky bit or an odd (nonzero) exponent
        round_up = ((bits & 0x400000) != 0) & (((bits & 0x3FFFFF) != 0) | (exponent != 0))
    elif round_mode == "down":
        round_up = exponent != exponent
    else:
        raise ValueError(f"Cast: round_mode must be 'up', 'nearest' or 'down': got {round_mode!r}")
    if saturate:
        round_up = round_up & (exponent != 0xFE)
    code = (exponent == 0xFF).where(0xFF, exponent + round_up.cast(dtypes.uint32))
    # 2**(code-127) as float32 bits: code 0 is the subnormal 2**-127; code 255 is NaN
    value_bits = (code == 0).where(0x400000, (code >= 0xFF).where(0x7FC00000, code << 23))
    return value_bits.cast(dtypes.uint32).bitcast(dtypes.float32)


def cast_to(x: Tensor, code: int, saturate: bool = True, round_mode: str = "up") -> Tensor:
    """x as ONNX element type `code` (a TensorProto.DataType), in its fusegrad dtype or container."""
    target = dtype_of(code, "Cast")
    if target == dtypes.bool:
        return x != 0
    if code in SUBBYTE_INT_RANGES:
        return wrap_int(x, code)
    if code == onnx.TensorProto.FLOAT4E2M1:
        return round_float4(x)
    if code == onnx.TensorProto.FLOAT8E8M0:
        return round_e8m0(x, saturate, round_mode)
    if target in FP8_FORMATS and not saturate and dtypes.is_float(x.dtype):
        return cast_fp8_unsaturated(x, code)
    return x.cast(target)


@onnx_op("Cast")
def cast(x: Tensor, to: int, saturate: int = 1, round_mode: str = "up") -> Tensor:
    return cast_to(x, to, bool(saturate), round_mode)


@onnx_op("CastLike")
def cast_like(
    x: Tensor, like: Tensor, saturate: int = 1, round_mode: str = "up", input_types: tuple[int, ...] = ()
) -> Tensor:
    # like's ONNX type: from the graph where it says (a sub-byte type shares its container with a wider one)
    code = input_types[1] if len(input_types) > 1 and input_types[1] else onnx_type_of(like.dtype)
    return cast_to(x, code, bool(saturate), round_mode)
