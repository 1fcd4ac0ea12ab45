"""Helpers shared by the test modules (one home, imported as `test.shared`): loading a script that is not a package
module (bench/, tools/), comparing a result with its reference at the tolerance of its dtype, counting a schedule's
kernels, whether OpenCL opens here, and the small realized-kernel chains the JIT and graph tests replay."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from fusegrad import Tensor
from fusegrad.dtype import DType, dtypes
from fusegrad.uop import Ops

ROOT = Path(__file__).resolve().parents[1]


def load_script(path: Path, name: str) -> ModuleType:
    """The Python file at `path` imported as module `name` (registered in sys.modules: dataclasses look it up)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None, f"cannot load {path}"
    assert spec.loader is not None, f"cannot load {path}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# (rtol, atol) of an op's result per dtype against numpy/torch in float64; ints and bools compare exactly
TOLERANCES: dict[DType, tuple[float, float]] = {dtypes.float32: (1e-5, 1e-6), dtypes.float16: (1e-2, 1e-3)}
# forward values and gradients through autograd: a gradient sums over broadcast axes and chains several ops' rounding
GRAD_TOLERANCES: dict[DType, tuple[float, float]] = {
    dtypes.float32: (1e-4, 1e-5), dtypes.float16: (1e-2, 1e-2), dtypes.float64: (1e-9, 1e-12)}  # fmt: skip


def assert_matches(
    t: Tensor, ref: Any, dtype: DType | None = None, rtol: float | None = None, atol: float | None = None
) -> None:
    """`t` equals the reference (a numpy array, a torch tensor or nested lists): the same shape, dtype `dtype` when
    given, float values within TOLERANCES of t's dtype (NaN matches NaN; a float16 result is compared with the
    reference rounded to float16, large values to inf), other values exactly."""
    ref = ref.detach().numpy() if hasattr(ref, "detach") else np.asarray(ref)  # torch without importing it here
    if dtype is not None:
        assert t.dtype == dtype, f"dtype {t.dtype}, expected {dtype}"
    out = t.numpy()
    assert out.shape == ref.shape, f"shape {out.shape}, expected {ref.shape}"
    if t.dtype == dtypes.float16:
        with np.errstate(over="ignore"):
            ref = ref.astype(np.float16)
    if not dtypes.is_float(t.dtype):
        np.testing.assert_array_equal(out, ref.astype(out.dtype))
        return
    default_rtol, default_atol = TOLERANCES.get(t.dtype, (1e-5, 1e-6))
    np.testing.assert_allclose(
        out.astype(np.float64),
        ref.astype(np.float64),
        rtol=default_rtol if rtol is None else rtol,
        atol=default_atol if atol is None else atol,
        equal_nan=True,
    )


def cl_unavailable() -> str | None:
    """Why the CL device does not open here (None: it opens; PoCL on CI)."""
    from fusegrad.device import Device

    try:
        Device["CL"]
    except Exception as err:  # any failure to open means: no OpenCL here
        return f"{type(err).__name__}: {err}"
    return None


def count_kernels(*tensors: Tensor) -> int:
    """How many kernels realizing the tensors together schedules (copies and buffer views not counted)."""
    return len([si for si in tensors[0].schedule(*tensors[1:]) if si.ast.op is Ops.SINK])


def vec(*values: float) -> Tensor:
    """A realized 1-d float tensor of the values."""
    return Tensor(list(values)).realize()


def steps(x: Tensor, n: int) -> Tensor:
    """n realized kernels: x -> (x + 1) * 2 -> ... ."""
    for _ in range(n):
        x = ((x + 1) * 2).realize()
    return x


def expected(values: list[float], n: int) -> list[float]:
    """What `steps` gives for these values, computed in Python."""
    for _ in range(n):
        values = [(v + 1) * 2 for v in values]
    return values
