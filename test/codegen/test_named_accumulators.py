"""codegen/linearize.py named_accumulators: a register tile of more than ARRAY_TILE_MAX vector accumulators keeps
each in a variable of its own (a one-element register, which the C renderer declares as a plain variable), not in
an array that gcc copies and spills in the inner loop; smaller tiles keep the array."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fusegrad.codegen import KernelInfo, to_program
from fusegrad.codegen.linearize import ARRAY_TILE_MAX
from fusegrad.codegen.opt import Opt, OptOps
from fusegrad.device import Device
from fusegrad.dtype import DType, dtypes
from fusegrad.helpers import Context
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp
from test.codegen.test_opt import data, glob, loop, matmul, red, run

F32 = dtypes.float32
# codegen tests see 8-lane vectors (conftest.py): 6 rows x 4 vectors of 8 columns, 24 accumulators
TILE_6X4 = (Opt(OptOps.UPCAST, 0, 6), Opt(OptOps.UPCAST, 1, 32))
TILE_4X4 = (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 32))  # 16: the array


def source(ast: UOp, opts: tuple[Opt, ...]) -> str:
    return to_program(ast.replace(arg=KernelInfo(opts_to_apply=opts)), Device["CPU"].renderer).src


def fma_targets(src: str) -> list[str]:
    """The left-hand sides of the kernel's vector fmas (`acc3` or `acc1[alu4+ridx9]`)."""
    return re.findall(r"^\s*(\S+) = fg_fma_float8\(", src, flags=re.MULTILINE)


def test_a_tile_of_24_vectors_updates_24_plain_variables() -> None:
    src = source(matmul(12, 16, 64, F32)[0], TILE_6X4)
    targets = fma_targets(src)
    assert len(targets) == 24, src
    assert all(re.fullmatch(r"acc\d+", t) for t in targets), targets
    assert len(set(targets)) == 24
    for name in targets:  # declared one by one, set to 0 before the reduce loop
        assert f"float8 {name};" in src
    assert "float8 acc1[24]" not in src


def test_a_tile_of_16_vectors_keeps_its_array() -> None:
    assert ARRAY_TILE_MAX == 16
    src = source(matmul(12, 16, 64, F32)[0], TILE_4X4)
    targets = fma_targets(src)
    assert targets, src
    assert all(re.fullmatch(r"acc0\[.*\]", t) for t in targets), targets
    assert "float8 acc0[16];" in src


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("shape", [(12, 16, 64), (6, 1, 32), (18, 33, 96)])
def test_the_named_tile_gives_the_plain_kernels_bits(device: str, shape: tuple[int, int, int]) -> None:
    ast, inputs, expected = matmul(*shape, F32)
    with Context(NOOPT=1):
        plain = run(ast, inputs, expected.size, F32, "PYTHON")
    got = run(ast.replace(arg=KernelInfo(opts_to_apply=TILE_6X4)), inputs, expected.size, F32, device)
    np.testing.assert_array_equal(got, plain)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def column_max(rows: int, k: int, cols: int, dt: DType) -> tuple[UOp, list[np.ndarray], np.ndarray]:
    """out (rows, cols) = max over k of a (rows, k) + b (k, cols): a max reduce over the same tile."""
    r0, r1, r2 = loop(rows, 0), loop(cols, 1), red(k, 2)
    value = glob(1, rows * k, dt).index(r0 * k + r2).load() + glob(2, k * cols, dt).index(r2 * cols + r1).load()
    ast = UOp.sink(glob(0, rows * cols, dt).index(r0 * cols + r1).store(value.reduce(r2, arg=Ops.MAX)))
    a, b = data((rows, k), dt), data((k, cols), dt, 1)
    return ast, [a, b], (a[:, :, None] + b[None, :, :]).max(axis=1).ravel()


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_a_named_max_tile_starts_from_the_minimum(device: str) -> None:
    ast, inputs, expected = column_max(6, 5, 32, F32)
    got = run(ast.replace(arg=KernelInfo(opts_to_apply=TILE_6X4)), inputs, expected.size, F32, device)
    np.testing.assert_array_equal(got, expected)
