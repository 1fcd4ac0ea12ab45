"""bfloat16 and fp8 in the C renderer: stored as bits, computed in float and rounded after every op.

Checked three ways on random values: the CPU (C) device against the PYTHON device bit for bit, casts against
ml_dtypes (numpy's bfloat16/float8 types; its float8 casts do not saturate, so inputs stay in range there), and the
generated C for the expected helpers.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fusegrad import Tensor, dtypes
from fusegrad.device import is_dtype_supported
from fusegrad.dtype import DType
from fusegrad.renderer.cstyle import ClangRenderer

EMULATED = [dtypes.bfloat16, *dtypes.fp8s]
ML_DTYPES = {dtypes.bfloat16: ml_dtypes.bfloat16, dtypes.fp8e4m3: ml_dtypes.float8_e4m3fn,
             dtypes.fp8e5m2: ml_dtypes.float8_e5m2, dtypes.fp8e4m3fnuz: ml_dtypes.float8_e4m3fnuz,
             dtypes.fp8e5m2fnuz: ml_dtypes.float8_e5m2fnuz}  # fmt: skip
LARGEST = {dtypes.bfloat16: 3.0e38, dtypes.fp8e4m3: 448.0, dtypes.fp8e5m2: 57344.0, dtypes.fp8e4m3fnuz: 240.0,
           dtypes.fp8e5m2fnuz: 57344.0}  # fmt: skip


def random_values(dt: DType, n: int = 2000, seed: int = 0) -> np.ndarray:
    """float32 values across the dtype's range: normals of every scale, subnormals, zeros, and exact ties."""
    rng = np.random.default_rng(seed)
    scale = np.float32(LARGEST[dt])
    values = rng.standard_normal(n).astype(np.float32) * np.exp2(rng.uniform(-20, np.log2(scale) - 1, n)).astype(
        np.float32
    )
    # exact representable values and the midpoints between neighbours (round-half-to-even ties)
    grid = np.asarray(rng.uniform(-1, 1, 64), np.float32).astype(ML_DTYPES[dt]).astype(np.float32)
    return np.concatenate([values, grid, grid * np.float32(1.0 + 2.0**-9), np.float32([0.0, -0.0])])


def bits_of(t: Tensor) -> list[int]:
    return t.bitcast(dtypes.uint8 if t.dtype.itemsize == 1 else dtypes.uint16).tolist()  # type: ignore[return-value]


def test_cpu_supports_them() -> None:
    assert all(is_dtype_supported(dt, "CPU") for dt in EMULATED)


@pytest.mark.parametrize("dt", EMULATED, ids=repr)
def test_cast_matches_ml_dtypes(dt: DType) -> None:
    x = random_values(dt)
    x = x[np.abs(x) <= LARGEST[dt]]  # in range: ml_dtypes' float8 casts give inf/NaN past it, fusegrad saturates
    got = Tensor(x, device="CPU").cast(dt).cast(dtypes.float32).numpy()
    want = x.astype(ML_DTYPES[dt]).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("dt", EMULATED, ids=repr)
def test_arithmetic_matches_python_device(dt: DType) -> None:
    x, y = random_values(dt, 300, seed=1) / 4, random_values(dt, 300, seed=2) / 4

    def compute(device: str) -> tuple[list[int], list[int]]:
        a, b = Tensor(x, device=device).cast(dt), Tensor(y, device=device).cast(dt)
        out = (a * b + a - b / 3).maximum(a) * 0.5
        return bits_of(out), bits_of((a - b).exp2().cast(dt))

    assert compute("CPU") == compute("PYTHON")


@pytest.mark.parametrize("dt", EMULATED, ids=repr)
def test_arithmetic_rounds_each_op(dt: DType) -> None:
    """Each op's float32 result, rounded to dt (by ml_dtypes), is what the kernel stores."""
    x, y = random_values(dt, 500, seed=3), random_values(dt, 500, seed=4)
    a32 = x.astype(ML_DTYPES[dt]).astype(np.float32)
    b32 = y.astype(ML_DTYPES[dt]).astype(np.float32)
    with np.errstate(over="ignore"):  # bfloat16's range is float32's: some products overflow, and are skipped
        product = a32 * b32
    keep = np.abs(product) <= LARGEST[dt]
    got = (Tensor(x, device="CPU").cast(dt) * Tensor(y, device="CPU").cast(dt)).cast(dtypes.float32).numpy()
    np.testing.assert_array_equal(got[keep], product[keep].astype(ML_DTYPES[dt]).astype(np.float32))


def test_fnuz_has_no_negative_zero_and_one_nan() -> None:
    for dt in dtypes.fp8_fnuz:
        t = Tensor(np.float32([-0.0, -1e-30, np.nan, -np.nan]), device="CPU").cast(dt)
        assert bits_of(t) == [0, 0, 0x80, 0x80]


def test_fp8_saturates_like_onnx() -> None:
    x = np.float32([1e6, -1e6, np.inf, -np.inf, 464.0, 465.0])
    got = Tensor(x, device="CPU").cast(dtypes.fp8e4m3).cast(dtypes.float32).tolist()
    assert got == [448.0, -448.0, 448.0, -448.0, 448.0, 448.0]
    assert np.isnan(Tensor([np.nan], device="CPU").cast(dtypes.fp8e4m3).cast(dtypes.float32).item())


@pytest.mark.parametrize("dt", EMULATED, ids=repr)
def test_to_int_and_bitcast(dt: DType) -> None:
    x = np.float32([0.0, 1.5, -2.75, 200.0, -0.001])  # in range of all: ml_dtypes does not saturate
    t = Tensor(x, device="CPU").cast(dt)
    assert t.cast(dtypes.int32).tolist() == Tensor(x, device="PYTHON").cast(dt).cast(dtypes.int32).tolist()
    assert bits_of(t) == [int(v) for v in x.astype(ML_DTYPES[dt]).view(np.uint8 if dt.itemsize == 1 else np.uint16)]
    bits = Tensor(bits_of(t), dtype=dtypes.uint8 if dt.itemsize == 1 else dtypes.uint16, device="CPU")
    assert bits.bitcast(dt).cast(dtypes.float32).tolist() == t.cast(dtypes.float32).tolist()


def test_sum_of_bfloat16_accumulates_in_float32() -> None:
    x = np.full(4096, 1.0, np.float32)
    assert Tensor(x, device="CPU").cast(dtypes.bfloat16).sum().cast(dtypes.float32).item() == 4096.0


def test_rendered_c_stores_bits() -> None:
    lang = ClangRenderer()
    assert lang.render_dtype(dtypes.bfloat16) == "float"  # values are held in float
    assert lang.emulated_floats[dtypes.bfloat16] == "unsigned short"
    assert all(lang.emulated_floats[dt] == "unsigned char" for dt in dtypes.fp8s)


@pytest.mark.parametrize("dt", EMULATED, ids=repr)
def test_numpy_widens_to_float32(dt: DType) -> None:
    """As in the reference: numpy has no such dtype, so .numpy() gives the values as float32."""
    got = Tensor([1.5, -0.25], device="CPU").cast(dt).numpy()
    assert got.dtype == np.float32
    assert got.tolist() == [1.5, -0.25]
