"""Defined results where C has none (docs/KERNEL_IR.md §5): integer division and modulo by zero, INT_MIN // -1, wide
shifts and float -> int casts of NaN, inf and out-of-range values, the same on CPU and PYTHON and as numpy on x86.

The cases that used to kill the process (SIGFPE, SIGILL) run in a child process, so a regression fails one test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from fusegrad import Tensor, dtypes
from fusegrad.dtype import DType, _to_np_dtype
from fusegrad.uop.alu import float_to_int

REPO = Path(__file__).resolve().parent.parent
DEVICES = ["CPU", "PYTHON"]


def run_child(device: str, expression: str) -> list[object]:
    """`expression` (a Tensor) evaluated in a fresh process on `device`; its value as a list. A crash fails here."""
    code = f"import json\nfrom fusegrad import Tensor, dtypes\nprint(json.dumps(({expression}).tolist()))"
    env = {**os.environ, "DEV": device}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{device}: `{expression}` exited with {proc.returncode}:\n{proc.stderr[-2000:]}"
    return json.loads(proc.stdout.splitlines()[-1])  # type: ignore[no-any-return]  # a JSON list


# *** the crashes of issue 19 ***


@pytest.mark.parametrize("device", DEVICES)
def test_floor_division_by_a_zero_tensor_is_zero(device: str) -> None:
    a, b = "Tensor([1, 2], dtype=dtypes.int32)", "Tensor([0, 1], dtype=dtypes.int32)"
    assert run_child(device, f"({a} // {b})") == [0, 2]


@pytest.mark.parametrize("device", DEVICES)
def test_modulo_by_a_zero_tensor_is_zero(device: str) -> None:
    a, b = "Tensor([1, 2, -3], dtype=dtypes.int32)", "Tensor([0, 0, 2], dtype=dtypes.int32)"
    assert run_child(device, f"({a} % {b})") == [0, 0, 1]


@pytest.mark.parametrize("device", DEVICES)
def test_int_min_floor_divided_by_minus_one_wraps(device: str) -> None:
    a, b = "Tensor([-2**31, -2**31], dtype=dtypes.int32)", "Tensor([-1, -1], dtype=dtypes.int32)"
    assert run_child(device, f"({a} // {b})") == [-(2**31)] * 2
    assert run_child(device, f"({a} % {b})") == [0, 0]
    a64, b64 = "Tensor([-2**63], dtype=dtypes.int64)", "Tensor([-1], dtype=dtypes.int64)"
    assert run_child(device, f"({a64}.idiv({b64}))") == [-(2**63)]


@pytest.mark.parametrize("device", DEVICES)
def test_constant_zero_divisor_folds_to_zero(device: str) -> None:  # was SIGILL: gcc's trap for x / 0
    assert run_child(device, "(Tensor([1, 2], dtype=dtypes.int64) // 0)") == [0, 0]
    assert run_child(device, "(Tensor([1, 2], dtype=dtypes.int64) % 0)") == [0, 0]


@pytest.mark.parametrize("device", DEVICES)
def test_float_to_int32_cast_of_special_values(device: str) -> None:
    expression = "Tensor([1e20, float('nan'), -1e20, 3.7, float('inf')]).cast(dtypes.int32)"
    assert run_child(device, expression) == [-(2**31)] * 3 + [3, -(2**31)]


# *** in process: the same semantics checked more widely ***

SPECIAL = [1e20, float("nan"), -1e20, 3.7, -3.7, float("inf"), float("-inf"), 300.7, -300.7, 70000.5, -1.5,
           2.0**31, -(2.0**31) - 5000, 2.0**32 + 5, 2.0**63, -(2.0**63), 2.0**64, 1e19, -1e19, 65535.9, 0.0, -0.0,
           1e-40]  # fmt: skip
INT_DTYPES = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32,
              dtypes.uint64]  # fmt: skip


def numpy_scalar_cast(values: np.ndarray, dt: DType) -> list[int]:
    """numpy's conversion one element at a time (its scalar loop: for uint32 its SIMD loop gives other values)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return [int(np.array([v]).astype(dt.fmt if dt.fmt else "")[0]) for v in values]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("src", [dtypes.float16, dtypes.float32, dtypes.float64])
@pytest.mark.parametrize("dt", INT_DTYPES)
def test_float_to_int_casts_match_numpy(device: str, src: DType, dt: DType) -> None:
    with np.errstate(over="ignore"):  # 1e20 as float16 is inf, as intended
        values = np.array(SPECIAL, dtype=np.float64).astype(_to_np_dtype(src))
    got = Tensor(values, device=device).cast(dt).tolist()
    assert got == numpy_scalar_cast(values, dt)
    assert got == [float_to_int(float(v), dt) for v in values]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint32])
def test_integer_division_by_zero_matches_numpy(device: str, dt: DType) -> None:
    info = np.iinfo(dt.fmt)
    x = (
        np.array([0, 1, -1, 7, int(info.min), int(info.max)], dtype=info.dtype)
        if info.min < 0
        else np.array([0, 1, 7, int(info.max)], dtype=info.dtype)
    )
    y = np.array([0, -1, 0, 3, -1, 0] if info.min < 0 else [0, 0, 3, 0], dtype=info.dtype)
    a, b = Tensor(x, device=device), Tensor(y, device=device)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal((a // b).numpy(), np.floor_divide(x, y))
        np.testing.assert_array_equal((a % b).numpy(), np.remainder(x, y))


@pytest.mark.parametrize("device", DEVICES)
def test_wide_shifts_match_numpy(device: str) -> None:
    x = np.array([1, -8, 5, -1], dtype=np.int32)
    for count in (-1, 31, 32, 40):
        shift = np.full(4, count, dtype=np.int32)
        a, b = Tensor(x, device=device), Tensor(shift, device=device)
        np.testing.assert_array_equal((a << b).numpy(), np.left_shift(x, shift))
        np.testing.assert_array_equal((a >> b).numpy(), np.right_shift(x, shift))


@pytest.mark.parametrize("device", DEVICES)
def test_float_division_by_zero_follows_ieee(device: str) -> None:
    x = Tensor([1.0, -1.0, 0.0, float("nan")], device=device)
    got = (x / Tensor([0.0, 0.0, 0.0, 0.0], device=device)).numpy()
    np.testing.assert_array_equal(got, [np.inf, -np.inf, np.nan, np.nan])


@pytest.mark.parametrize("device", DEVICES)
def test_small_ints_wrap_inside_a_fused_expression(device: str) -> None:
    # C adds int8s as ints: (100 + 100) < 0 must see -56, as the IR (and numpy) define it
    a = Tensor(np.array([100, -128], dtype=np.int8), device=device)
    b = Tensor(np.array([100, -1], dtype=np.int8), device=device)
    assert ((a + b) < 0).tolist() == [True, False]
    assert (Tensor(np.array([1, 2], dtype=np.int8), device=device) < 300).tolist() == [True, True]  # 300 wraps to 44


@pytest.mark.parametrize("device", DEVICES)
def test_integer_pow_wraps_at_any_exponent(device: str) -> None:  # fuzz findings: float32 inf, and a lost top bit
    x = np.array([2, 3, 5], dtype=np.uint16)
    got = Tensor(x, device=device) ** 32768
    assert got.dtype == dtypes.uint16
    np.testing.assert_array_equal(got.numpy(), np.power(x, 32768))
    big = np.array([2**63, 3, 2], dtype=np.uint64)
    np.testing.assert_array_equal(
        (Tensor(big, device=device) ** Tensor(big, device=device)).numpy(), np.power(big, big)
    )
