"""ClangRenderer: C text of each op and constant, golden kernels, and compile-and-run checks against numpy.

The compile-and-run helper is local (cc -O2 -shared -fopenmp, loaded with ctypes): it proves the C is right without
the CPU runtime. Golden sources live in test/codegen/golden/; `UPDATE_GOLDEN=1` rewrites them.
"""

from __future__ import annotations

import ctypes
import math
import pathlib
import shutil
import subprocess
from collections.abc import Callable

import numpy as np
import pytest

from fusegrad.codegen import KernelInfo, full_rewrite, kernel_names, to_program
from fusegrad.dtype import DType, _to_np_dtype, dtypes
from fusegrad.helpers import getenv
from fusegrad.renderer import ProgramSpec
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp

GOLDEN = pathlib.Path(__file__).resolve().parent.parent / "codegen" / "golden"
HAS_CC = shutil.which("cc") is not None
needs_cc = pytest.mark.skipif(not HAS_CC, reason="no C compiler (cc) on PATH")


# *** helpers ***


def glob(slot: int, size: int, dt: DType = dtypes.float32) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dt.ptr(size), arg=slot)


def rng(end: int | UOp, axis: int, axis_type: AxisType = AxisType.LOOP) -> UOp:
    return UOp.range(end, axis, axis_type)


def compile_program(prg: ProgramSpec, tmp_path: pathlib.Path) -> Callable[..., None]:
    """The kernel as a Python function of numpy arrays and ints (buffers in slot order, then variables)."""
    lib = tmp_path / f"{prg.function_name}.so"
    cmd = ["cc", "-O2", "-shared", "-fPIC", "-fopenmp", "-x", "c", "-", "-o", str(lib)]
    subprocess.run(cmd, input=prg.src.encode(), check=True, capture_output=True)
    fn = getattr(ctypes.CDLL(str(lib)), prg.function_name)

    def call(*args: np.ndarray | int) -> None:
        fn(*(ctypes.c_void_p(a.ctypes.data) if isinstance(a, np.ndarray) else ctypes.c_longlong(a) for a in args))

    return call


# *** canonical kernels: (AST, inputs by slot from 1, numpy reference of slot 0) ***

Case = tuple[UOp, list[np.ndarray], Callable[..., np.ndarray]]
rand = np.random.default_rng(0)


def floats(*shape: int) -> np.ndarray:
    return rand.standard_normal(shape).astype(np.float32)


def kernel_add() -> Case:
    r0 = rng(16, 0)
    ast = UOp.sink(glob(0, 16).index(r0).store(glob(1, 16).index(r0).load() + glob(2, 16).index(r0).load()))
    return ast, [floats(16), floats(16)], lambda a, b: a + b


def kernel_permute() -> Case:
    r0, r1 = rng(4, 0), rng(8, 1)  # out (4, 8) = a (8, 4).T
    ast = UOp.sink(glob(0, 32).index(r0 * 8 + r1).store(glob(1, 32).index(r1 * 4 + r0).load()))
    return ast, [floats(32)], lambda a: a.reshape(8, 4).T.reshape(-1)


def kernel_sum_axis() -> Case:
    r0, r1 = rng(4, 0), rng(8, 1, AxisType.REDUCE)  # out (4,) = a (4, 8).sum(1)
    ast = UOp.sink(glob(0, 4).index(r0).store(glob(1, 32).index(r0 * 8 + r1).load().reduce(r1, arg=Ops.ADD)))
    return ast, [floats(32)], lambda a: a.reshape(4, 8).sum(1)


def kernel_max_reduce() -> Case:
    r0, r1 = rng(8, 0), rng(4, 1, AxisType.REDUCE)  # out (8,) = a (4, 8).max(0)
    ast = UOp.sink(glob(0, 8).index(r0).store(glob(1, 32).index(r1 * 8 + r0).load().reduce(r1, arg=Ops.MAX)))
    return ast, [floats(32)], lambda a: a.reshape(4, 8).max(0)


def kernel_pad() -> Case:
    r0 = rng(10, 0)  # out (10,) = pad(a (8,), (1, 1))
    valid = (r0 >= 1) & (r0 < 9)
    ast = UOp.sink(glob(0, 10).index(r0).store(glob(1, 8).index(r0 - 1, valid).load()))
    return ast, [floats(8)], lambda a: np.pad(a, (1, 1))


def kernel_where_cmp() -> Case:
    r0 = rng(16, 0)  # out = where(a < b, a, b * 2)
    a, b = glob(1, 16).index(r0).load(), glob(2, 16).index(r0).load()
    ast = UOp.sink(glob(0, 16).index(r0).store((a < b).where(a, b * 2.0)))
    return ast, [floats(16), floats(16)], lambda a, b: np.where(a < b, a, b * 2)


def kernel_cast() -> Case:
    r0 = rng(16, 0)  # out float32 = a int32
    ast = UOp.sink(glob(0, 16).index(r0).store(glob(1, 16, dtypes.int32).index(r0).load().cast(dtypes.float32)))
    return ast, [rand.integers(-1000, 1000, 16).astype(np.int32)], lambda a: a.astype(np.float32)


def kernel_symbolic() -> Case:
    n = UOp.variable("n", 1, 64)
    r0 = rng(n, 0)  # out[:n] = a[:n] * 3
    ast = UOp.sink(glob(0, 64).index(r0).store(glob(1, 64).index(r0).load() * 3.0))
    return ast, [floats(64)], lambda a: a * 3


def kernel_matmul() -> Case:
    r0, r1, r2 = rng(4, 0), rng(5, 1), rng(6, 2, AxisType.REDUCE)  # out (4, 5) = a (4, 6) @ b (6, 5)
    product = glob(1, 24).index(r0 * 6 + r2).load() * glob(2, 30).index(r2 * 5 + r1).load()
    ast = UOp.sink(glob(0, 20).index(r0 * 5 + r1).store(product.reduce(r2, arg=Ops.ADD)))
    return ast, [floats(24), floats(30)], lambda a, b: (a.reshape(4, 6) @ b.reshape(6, 5)).reshape(-1)


def kernel_unary_chain() -> Case:
    r0 = rng(16, 0)  # out = sqrt(exp2(a) * 0.5 + 1)
    x = glob(1, 16).index(r0).load()
    ast = UOp.sink(glob(0, 16).index(r0).store((x.exp2() * 0.5 + 1.0).sqrt()))
    return ast, [floats(16)], lambda a: np.sqrt(np.exp2(a) * 0.5 + 1)


def kernel_reduce_then_elementwise() -> Case:
    r0, r1 = rng(4, 0), rng(8, 1, AxisType.REDUCE)  # out (4,) = a (4, 8).sum(1) * 2 + b
    total = glob(1, 32).index(r0 * 8 + r1).load().reduce(r1, arg=Ops.ADD)
    ast = UOp.sink(glob(0, 4).index(r0).store(total * 2.0 + glob(2, 4).index(r0).load()))
    return ast, [floats(32), floats(4)], lambda a, b: a.reshape(4, 8).sum(1) * 2 + b


CANONICAL: dict[str, Callable[[], Case]] = {f.__name__.removeprefix("kernel_"): f for f in (
    kernel_add, kernel_permute, kernel_sum_axis, kernel_max_reduce, kernel_pad, kernel_where_cmp, kernel_cast,
    kernel_symbolic, kernel_matmul, kernel_unary_chain, kernel_reduce_then_elementwise)}  # fmt: skip


@pytest.fixture(autouse=True)
def _fresh_kernel_names() -> None:
    kernel_names.clear()  # names get n1, n2... suffixes on repeats within a process: start every test fresh


@pytest.mark.parametrize("name", CANONICAL)
def test_golden(name: str) -> None:
    src = to_program(CANONICAL[name]()[0], ClangRenderer()).src
    path = GOLDEN / f"{name}.c"
    if getenv("UPDATE_GOLDEN", 0) or not path.exists():
        path.write_text(src)
    assert src == path.read_text(), f"{name}: rendered kernel differs from {path} (UPDATE_GOLDEN=1 rewrites it)"


@needs_cc
@pytest.mark.parametrize("name", CANONICAL)
def test_canonical_runs(name: str, tmp_path: pathlib.Path) -> None:
    ast, inputs, reference = CANONICAL[name]()
    prg = to_program(ast, ClangRenderer())
    expected = reference(*inputs)
    out = np.zeros_like(expected)
    variables = [64] * len(prg.vars)
    compile_program(prg, tmp_path)(out, *inputs, *variables)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
