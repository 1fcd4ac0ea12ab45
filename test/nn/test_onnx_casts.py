"""fusegrad.nn.onnx.casts against the ONNX reference's conversions (ml_dtypes and onnx.numpy_helper) on random values
across each type's range plus its edge values (ties, overflow, infinities, NaN, zeros)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ml_dtypes = pytest.importorskip("ml_dtypes")

from onnx import TensorProto, numpy_helper  # noqa: E402

from fusegrad import Tensor, dtypes  # noqa: E402
from fusegrad.nn.onnx.casts import cast_to  # noqa: E402

EDGES = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -9.5, 464.0, 465.0])


def random_floats(low_exponent: float, high_exponent: float, n: int = 3000) -> np.ndarray:
    """n values of magnitude 2**low_exponent .. 2**high_exponent (some overflow to inf, on purpose), then EDGES."""
    rng = np.random.default_rng(0)
    with np.errstate(over="ignore"):
        scale = np.exp2(rng.uniform(low_exponent, high_exponent, n)).astype(np.float32)
        return np.concatenate([rng.standard_normal(n).astype(np.float32) * scale, EDGES])


def as_float32(t: Tensor) -> np.ndarray:
    return (t.cast(dtypes.float32) if t.dtype in (dtypes.bfloat16, *dtypes.fp8s) else t).numpy().astype(np.float32)


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("round_mode", ["up", "nearest", "down"])
def test_float8e8m0(saturate: bool, round_mode: str) -> None:
    x = random_floats(-135, 130)
    got = as_float32(cast_to(Tensor(x), TensorProto.FLOAT8E8M0, saturate, round_mode))
    want = numpy_helper.to_float8e8m0(x, saturate, round_mode).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_float4e2m1_rounds_and_saturates() -> None:
    x = random_floats(-4, 5)
    got = as_float32(cast_to(Tensor(x), TensorProto.FLOAT4E2M1))
    want = numpy_helper.saturate_cast(x, np.dtype(ml_dtypes.float4_e2m1fn)).astype(np.float32)
    finite = ~np.isnan(x)  # ml_dtypes sends NaN to -0 (the type has no NaN), as cast_to does; assert_equal needs care
    np.testing.assert_array_equal(got[finite], want[finite])
    assert np.all(got[~finite] == 0)


@pytest.mark.parametrize(
    ("code", "bits", "signed"),
    [
        (TensorProto.INT4, 4, True),
        (TensorProto.UINT4, 4, False),
        (TensorProto.INT2, 2, True),
        (TensorProto.UINT2, 2, False),
    ],
)
def test_subbyte_ints_truncate_and_wrap(code: int, bits: int, signed: bool) -> None:
    # the oracle is written out (truncate toward zero, keep the low bits): ml_dtypes 0.6 wrapped out-of-range values,
    # 0.7 sends them to 0, so its cast is no reference for the spec's "truncate bits which can't be stored"
    x = np.concatenate([np.linspace(-40, 40, 321, dtype=np.float32), np.float32([np.nan])])
    got = cast_to(Tensor(x), code).numpy()
    low = np.trunc(np.nan_to_num(x)).astype(np.int64) & ((1 << bits) - 1)
    want = np.where(signed & (low >= 1 << (bits - 1)), low - (1 << bits), low)
    assert want.min() == (-(1 << (bits - 1)) if signed else 0)  # the input reaches every wrapped value's range
    np.testing.assert_array_equal(got.astype(np.int64), want)


@pytest.mark.parametrize(
    ("code", "numpy_type"),
    [
        (TensorProto.FLOAT8E4M3FN, "float8_e4m3fn"),
        (TensorProto.FLOAT8E5M2, "float8_e5m2"),
        (TensorProto.FLOAT8E4M3FNUZ, "float8_e4m3fnuz"),
        (TensorProto.FLOAT8E5M2FNUZ, "float8_e5m2fnuz"),
    ],
)
def test_float8_saturate_and_not(code: int, numpy_type: str) -> None:
    x = random_floats(-20, 18)
    target = np.dtype(getattr(ml_dtypes, numpy_type))
    unsaturated = as_float32(cast_to(Tensor(x), code, saturate=False))
    np.testing.assert_array_equal(unsaturated, x.astype(target).astype(np.float32))
    saturated = as_float32(cast_to(Tensor(x), code, saturate=True))
    np.testing.assert_array_equal(saturated, numpy_helper.saturate_cast(x, target).astype(np.float32))
