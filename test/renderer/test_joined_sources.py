"""The CPU compiler builds a batch of new kernels from their sources joined into one C file (ClangCompiler's
`joins_sources`). Helpers two kernels both need (vector FMA, vector exp2, bfloat16 and fp8 conversions) are defined
once there (cstyle.guarded): a second definition was a compile error, and every such batch fell back to one compiler
run per kernel."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from fusegrad import Tensor, dtypes
from fusegrad.codegen import to_program
from fusegrad.device import Device
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.runtime.support.compiler_cpu import ClangCompiler

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on PATH")


def _sources(*outs: Tensor) -> list[str]:
    """The C source of every kernel computing `outs`."""
    srcs = []
    for out in outs:
        for item in out.schedule():
            if item.ast.op.name == "SINK":
                srcs.append(to_program(item.ast, ClangRenderer()).src)
    return srcs


def test_kernels_sharing_helpers_build_joined() -> None:
    rng = np.random.default_rng(0)
    a, b = (Tensor(rng.standard_normal((64, 64), dtype=np.float32)) for _ in range(2))
    c = Tensor(rng.standard_normal((48, 64), dtype=np.float32))
    outs = [
        (a @ b).exp(),  # vector FMA tile and exp2
        (c @ a).exp(),
        a.cast(dtypes.bfloat16) * 2,
        (b.cast(dtypes.bfloat16) + 1).cast(dtypes.float32),
        a.cast(dtypes.fp8e4m3) * 2,
        (b.cast(dtypes.fp8e4m3) - 1).cast(dtypes.float32),
    ]
    srcs = _sources(*outs)
    assert any("fg_fma_" in s for s in srcs)
    assert sum("fg_load_bf16" in s for s in srcs) >= 2
    assert sum("fg_load_e4m3" in s for s in srcs) >= 2
    ClangCompiler().compile("\n".join(dict.fromkeys(srcs)))  # raised CompileError: "redefinition of 'fg_fma_...'"


def test_joined_batch_runs_right() -> None:
    """A batch of new kernels compiles joined and computes what numpy does."""
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((32, 48), dtype=np.float32), rng.standard_normal((48, 40), dtype=np.float32)
    a, b = Tensor(x, device=Device.DEFAULT), Tensor(y)
    first, second = (a @ b).exp2(), (a.T @ a).exp2()
    Tensor.realize(first, second)
    np.testing.assert_allclose(first.numpy(), np.exp2(x @ y), rtol=2e-5)
    np.testing.assert_allclose(second.numpy(), np.exp2(x.T @ x), rtol=2e-5)
