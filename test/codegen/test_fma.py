"""Tests for fusegrad/codegen/fma.py: accumulator updates `acc + a*b` become MULACC on renderers with an fma, and a
fused kernel gives the bits of C's fmaf applied in the reduce's order, on CPU (vector and scalar code) and PYTHON."""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.codegen import full_rewrite, to_program
from fusegrad.codegen.opt import Opt, OptOps
from fusegrad.device import Device
from fusegrad.dtype import DType, dtypes
from fusegrad.renderer import Renderer, cstyle
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop import Ops
from fusegrad.uop.ops import UOp
from test.codegen.test_opt import conv1d, glob, loop, matmul, run, with_opts

_LIBM = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
_LIBM.fmaf.restype = ctypes.c_float
_LIBM.fmaf.argtypes = [ctypes.c_float] * 3


@pytest.fixture(autouse=True)
def _fma_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fused on every host (without FMA instructions a fused kernel calls libm's fmaf: the same bits)."""
    monkeypatch.setattr(cstyle, "host_has_fma", lambda: True)


def mulaccs(ast: UOp, renderer: Renderer) -> list[UOp]:
    return [u for u in full_rewrite(ast, renderer) if u.op is Ops.MULACC]


def sequential_matmul(a: np.ndarray, b: np.ndarray, fused: bool) -> np.ndarray:
    """a @ b in float32, each output summed over k in order: acc = fmaf(a, b, acc), or acc + round(a*b)."""
    out = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            acc = np.float32(0)
            for k in range(a.shape[1]):
                acc = np.float32(_LIBM.fmaf(a[i, k], b[k, j], acc)) if fused else acc + a[i, k] * b[k, j]
            out[i, j] = acc
    return out


# 2 rows x a vector of 8 columns per tile (CPU: float8 code; the last upcast is the vector): every accumulator still
# sums its k in order
TILE = (Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 8))


@pytest.mark.parametrize("opts", [None, TILE, (Opt(OptOps.UPCAST, 1, 4),)], ids=["heuristic", "tile", "scalar-lanes"])
@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_matmul_gives_fmaf_in_order(device: str, opts: tuple[Opt, ...] | None) -> None:
    ast, (a, b), _ = matmul(4, 37, 16, dtypes.float32)
    fused, unfused = sequential_matmul(a, b, True), sequential_matmul(a, b, False)
    assert not np.array_equal(fused, unfused)  # the data tells the two apart
    got = run(with_opts(ast, opts), [a, b], 4 * 16, dtypes.float32, device).reshape(4, 16)
    if opts is None and device == "CPU":  # a plain reduce loop is `omp simd reduction`: reordered, so close only
        np.testing.assert_allclose(got, fused, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, fused)


def test_conv_cpu_and_python_agree_bit_for_bit() -> None:
    """A padded conv (gated loads, two reduce axes) tiled on CPU (lanes of fmaf under `omp simd`), plain on PYTHON:
    the same fmas in the same order."""
    ast, inputs, expected = conv1d(2, 5, 8, 16, dtypes.float32)
    tiled = run(with_opts(ast, (Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UPCAST, 2, 8))), inputs, 2 * 8 * 16,
                dtypes.float32, "CPU")  # fmt: skip
    plain = run(with_opts(ast, ()), inputs, 2 * 8 * 16, dtypes.float32, "PYTHON")
    np.testing.assert_array_equal(tiled, plain)
    np.testing.assert_allclose(tiled, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64])
def test_accumulators_are_fused_for_both_renderers(dt: DType) -> None:
    ast = with_opts(matmul(4, 8, 16, dt)[0], TILE)
    vectors = mulaccs(ast, ClangRenderer())
    assert vectors
    assert all(u.dtype.count > 1 and u.src[2].op is Ops.LOAD for u in vectors)  # acc = fma(a, b, acc)
    assert mulaccs(ast, Device["PYTHON"].renderer)


@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.int32])
def test_half_and_ints_are_not_fused(dt: DType) -> None:
    """Half computes in float32: fusing there rounds twice. Ints gain nothing."""
    assert not mulaccs(with_opts(matmul(4, 8, 16, dt)[0], TILE), ClangRenderer())


def test_no_fma_on_a_host_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cstyle, "host_has_fma", lambda: False)
    ast = with_opts(matmul(4, 8, 16, dtypes.float32)[0], TILE)
    assert not mulaccs(ast, ClangRenderer())
    assert not mulaccs(ast, Device["PYTHON"].renderer)  # PYTHON fuses as the CPU does


def test_elementwise_multiply_add_keeps_two_roundings() -> None:
    """out = a*b + c outside any reduce: memory-bound, and numpy's result bit for bit."""
    i = loop(64, 0)
    a, b, c = (glob(slot, 64, dtypes.float32).index(i).load() for slot in (1, 2, 3))
    ast = UOp.sink(glob(0, 64, dtypes.float32).index(i).store(a * b + c))
    assert not mulaccs(ast, ClangRenderer())
    x, y, z = (np.random.default_rng(seed).standard_normal(64).astype(np.float32) for seed in range(3))
    np.testing.assert_array_equal(run(ast, [x, y, z], 64, dtypes.float32, "CPU"), x * y + z)


def test_estimates_count_a_fused_multiply_add_as_two_ops() -> None:
    ast = with_opts(matmul(4, 8, 16, dtypes.float32)[0], TILE)
    assert to_program(ast, ClangRenderer()).estimates.ops == 2 * 4 * 8 * 16


def test_tensor_matmul_is_fused_end_to_end() -> None:
    a, b = Tensor.randn(8, 33), Tensor.randn(33, 16)
    (item,) = [si for si in (a @ b).schedule() if si.ast.op is Ops.SINK][-1:]
    assert mulaccs(item.ast, ClangRenderer())
    np.testing.assert_allclose((a @ b).numpy(), a.numpy() @ b.numpy(), rtol=1e-5, atol=1e-5)
