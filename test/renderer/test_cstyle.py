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
import sys
import tempfile
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusegrad.codegen import KernelInfo, kernel_names, to_program, vectorize
from fusegrad.dtype import DType, _to_np_dtype, dtypes
from fusegrad.helpers import Context, getenv
from fusegrad.renderer import ProgramSpec, cstyle
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
    cmd = ["cc", "-O2", "-shared", "-fPIC", "-fopenmp", "-fwrapv", "-x", "c", "-", "-o", str(lib)]  # as the runtime
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


def kernel_matmul_tiled() -> Case:
    r0, r1, r2 = rng(16, 0), rng(16, 1), rng(4, 2, AxisType.REDUCE)  # out (16, 16) = a (16, 4) @ b (4, 16)
    product = glob(1, 64).index(r0 * 4 + r2).load() * glob(2, 64).index(r2 * 16 + r1).load()
    ast = UOp.sink(glob(0, 256).index(r0 * 16 + r1).store(product.reduce(r2, arg=Ops.ADD)))  # an 8x8 upcast tile
    return ast, [floats(64), floats(64)], lambda a, b: (a.reshape(16, 4) @ b.reshape(4, 16)).reshape(-1)


def kernel_gated_projections() -> Case:
    # out (16, 16) = silu(x @ g.T) * (x @ u.T), x (16, 32), g and u (16, 32): a fused SwiGLU; a tile of 4 rows x 16
    # columns over two packed weight panels, the silu run lane by lane on the vector accumulators
    i, j, r, s = rng(16, 0), rng(16, 1), rng(32, 2, AxisType.REDUCE), rng(32, 3, AxisType.REDUCE)
    gate = (glob(1, 512).index(i * 32 + r).load() * glob(2, 512).index(j * 32 + r).load()).reduce(r, arg=Ops.ADD)
    up = (glob(1, 512).index(i * 32 + s).load() * glob(3, 512).index(j * 32 + s).load()).reduce(s, arg=Ops.ADD)
    silu = gate * (1.0 + (gate * -1.4426950408889634).exp2()).reciprocal()
    ast = UOp.sink(glob(0, 256).index(i * 16 + j).store(silu * up))

    def reference(x: np.ndarray, g: np.ndarray, u: np.ndarray) -> np.ndarray:
        x64 = x.astype(np.float64).reshape(16, 32)
        a = x64 @ g.astype(np.float64).reshape(16, 32).T
        return (a / (1 + np.exp(-a)) * (x64 @ u.astype(np.float64).reshape(16, 32).T)).astype(np.float32).reshape(-1)

    # small values: 32-term float32 sums stay within the check's 1e-6 of the float64 reference
    return ast, [floats(512) * 0.1 for _ in range(3)], reference


def kernel_sum_grouped() -> Case:
    r0 = rng(1 << 20, 0, AxisType.REDUCE)  # out (1,) = a (1M,).sum(): 16 partial sums in parallel, then theirs
    total = glob(1, 1 << 20).index(r0).load().reduce(r0, arg=Ops.ADD)
    ast = UOp.sink(glob(0, 1).index(UOp.const(dtypes.index, 0)).store(total))
    whole = np.round(floats(1 << 20) * 4)  # small whole numbers: every summation order gives the exact sum
    return ast, [whole], lambda a: a.astype(np.float64).sum(keepdims=True).astype(np.float32)


def kernel_conv2d() -> Case:
    # out (2, 16, 8, 8) = conv of x (2, 4, 8, 8) padded by 1 (a gated load) with w (16, 4, 3, 3): the heuristic's tile
    n, o, y, x = rng(2, 0), rng(16, 1), rng(8, 2), rng(8, 3)
    c, ky, kx = rng(4, 4, AxisType.REDUCE), rng(3, 5, AxisType.REDUCE), rng(3, 6, AxisType.REDUCE)
    py, px = y + ky - 1, x + kx - 1
    valid = (py >= 0) & (py < 8) & (px >= 0) & (px < 8)
    inp = glob(1, 2 * 4 * 64).index(n * 256 + c * 64 + py * 8 + px, valid).load()
    weight = glob(2, 16 * 4 * 9).index(o * 36 + c * 9 + ky * 3 + kx).load()
    ast = UOp.sink(
        glob(0, 2 * 16 * 64).index(n * 1024 + o * 64 + y * 8 + x).store((inp * weight).reduce(c, ky, kx, arg=Ops.ADD))
    )

    def reference(xs: np.ndarray, ws: np.ndarray) -> np.ndarray:
        padded = np.pad(xs.astype(np.float64).reshape(2, 4, 8, 8), ((0, 0), (0, 0), (1, 1), (1, 1)))
        windows = np.stack([padded[:, :, i : i + 8, j : j + 8] for i in range(3) for j in range(3)], -1)
        out = np.einsum("ncyxk,ock->noyx", windows, ws.astype(np.float64).reshape(16, 4, 9))
        return out.astype(np.float32).reshape(-1)

    small_ints = [rand.integers(-4, 5, n).astype(np.float32) for n in (2 * 4 * 64, 16 * 4 * 9)]  # exact sums of 36
    return ast, small_ints, reference


CANONICAL: dict[str, Callable[[], Case]] = {f.__name__.removeprefix("kernel_"): f for f in (
    kernel_add, kernel_permute, kernel_sum_axis, kernel_max_reduce, kernel_pad, kernel_where_cmp, kernel_cast,
    kernel_symbolic, kernel_matmul, kernel_unary_chain, kernel_reduce_then_elementwise, kernel_matmul_tiled,
    kernel_gated_projections, kernel_sum_grouped, kernel_conv2d)}  # fmt: skip


@pytest.fixture(autouse=True)
def _fresh_kernel_names() -> None:
    kernel_names.clear()  # names get n1, n2... suffixes on repeats within a process: start every test fresh


@pytest.mark.parametrize("name", CANONICAL)
def test_golden(name: str) -> None:
    src = to_program(CANONICAL[name]()[0], ClangRenderer()).src
    path = GOLDEN / f"{name}.c"
    if getenv("UPDATE_GOLDEN", 0):
        path.write_text(src)
    assert path.exists(), f"{name}: no golden file {path} (UPDATE_GOLDEN=1 writes it)"
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


def test_golden_files_have_no_strays() -> None:
    assert {p.stem for p in GOLDEN.glob("*.c")} == set(CANONICAL), "a golden file without a canonical kernel"


# *** constants and types ***

CLANG = ClangRenderer()


@pytest.mark.parametrize(
    ("value", "dt", "text"),
    [(1.0, dtypes.float32, "1.0f"), (0.1, dtypes.float32, "0.1f"), (-2.5, dtypes.float32, "(-2.5f)"),
     (1e-30, dtypes.float32, "1e-30f"), (3.4028234663852886e38, dtypes.float32, "3.4028235e+38f"),
     (-0.0, dtypes.float32, "(-0.0f)"), (math.inf, dtypes.float32, "__builtin_inff()"),
     (-math.inf, dtypes.float32, "(-__builtin_inff())"), (math.nan, dtypes.float32, '__builtin_nanf("")'),
     (0.1, dtypes.float64, "0.1"), (1e300, dtypes.float64, "1e+300"), (2.0, dtypes.float64, "2.0"),
     (0.5, dtypes.float16, "((_Float16)0.5f)"), (True, dtypes.bool, "1"), (False, dtypes.bool, "0"),
     (7, dtypes.int32, "7"), (-7, dtypes.int32, "(-7)"), (-(2**31), dtypes.int32, "(-2147483647-1)"),
     (7, dtypes.uint32, "7u"), (7, dtypes.int64, "7ll"), (-(2**63), dtypes.int64, "(-9223372036854775807ll-1)"),
     (2**64 - 1, dtypes.uint64, "18446744073709551615ull"), (5, dtypes.index, "5"),
     (2**40, dtypes.index, "1099511627776ll"), (-3, dtypes.int8, "(-3)"), (1e39, dtypes.float32, "__builtin_inff()"),
     (65520.0, dtypes.float16, "__builtin_inff()"), (0.1, dtypes.float16, "((_Float16)0.099975586f)")],
)  # fmt: skip
def test_render_const(value: float, dt: DType, text: str) -> None:
    assert CLANG.render_const(value, dt) == text


def test_float32_constants_read_back_exactly() -> None:
    for x in [float(v) for v in rand.standard_normal(200).astype(np.float32)] + [1 / 3, 2**-149, 16777217.0]:
        text = CLANG.render_const(x, dtypes.float32).strip("()").removesuffix("f")
        assert np.float32(float(text)) == np.float32(x), f"{x!r} rendered as {text}"


def test_type_names() -> None:
    assert [CLANG.render_dtype(dt) for dt in (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int64, dtypes.uint64,
            dtypes.float16, dtypes.index, dtypes.float64)] == ["_Bool", "signed char", "unsigned char", "long long",
            "unsigned long long", "_Float16", "long long", "double"]  # fmt: skip
    assert CLANG.render_dtype(dtypes.bfloat16) == "float"  # held in float, stored as bits (test_emulated_floats.py)
    # float vectors are GCC vector types (codegen/vectorize.py makes them); other vectors have no C spelling here
    assert [CLANG.render_dtype(dtypes.float32.vec(8)), CLANG.render_dtype(dtypes.float64.vec(4))] == [
        "float8",
        "double4",
    ]
    with pytest.raises(NotImplementedError, match="vector"):
        CLANG.render_dtype(dtypes.int32.vec(4))


def test_bitcast_needs_equal_sizes() -> None:
    with pytest.raises(ValueError, match="bitcast: sizes differ"):
        CLANG.render_bitcast("x", dtypes.float32, dtypes.int64)


def test_unsupported_op_names_the_op() -> None:
    r0 = rng(4, 0)
    x = glob(1, 4, dtypes.uint32).index(r0).load()
    ast = UOp.sink(glob(0, 4, dtypes.uint32).index(r0).store(UOp(Ops.THREEFRY, dtypes.uint32, (x, x))))
    with pytest.raises(NotImplementedError, match="THREEFRY"):
        to_program(ast, CLANG)


# *** signature and loops ***


def test_signature_follows_the_calling_convention() -> None:
    n = UOp.variable("n", 1, 8)
    r0 = rng(n, 0)
    inplace = glob(1, 8).index(r0)
    ast = UOp.sink(glob(0, 8).index(r0).store(inplace.load()), inplace.store(glob(2, 8).index(r0).load() + 1.0))
    prg = to_program(ast, CLANG)
    args = "float* restrict data0, float* restrict data1, const float* restrict data2, long long n"
    assert f"void E_n({args}) {{" in prg.src
    assert prg.outs == [0, 1]
    assert prg.ins == [1, 2]


def test_kernel_info_name_becomes_the_function_name() -> None:
    r0 = rng(4, 0)
    ast = UOp.sink(glob(0, 4).index(r0).store(UOp.const(dtypes.float32, 0.0)), arg=KernelInfo(name="zero-fill"))
    assert "void zero2Dfill(" in to_program(ast, CLANG).src


def test_parallel_pragma_only_on_big_outer_output_loops() -> None:
    big, small = rng(1 << 20, 0), rng(16, 1)
    ast = UOp.sink(glob(0, 1 << 20).index(big).store(glob(1, 1 << 20).index(big).load() * 2.0))
    assert "  #pragma omp parallel for simd simdlen(FG_SIMDLEN)\n  for (long long ridx0" in to_program(ast, CLANG).src
    ast = UOp.sink(glob(0, 16).index(small).store(glob(1, 16).index(small).load() * 2.0))
    assert "parallel" not in to_program(ast, CLANG).src
    r0, r1 = rng(1 << 12, 0), rng(1 << 12, 1, AxisType.REDUCE)  # big, but only the output loop gets threads
    total = glob(1, 1 << 24).index(r0 * (1 << 12) + r1).load().reduce(r1, arg=Ops.ADD)
    src = to_program(UOp.sink(glob(0, 1 << 12).index(r0).store(total)), CLANG).src
    assert src.count("#pragma omp parallel") == 1
    assert "  #pragma omp parallel for\n  for (long long ridx0" in src
    assert "    #pragma omp simd reduction(+:acc" in src  # the inner sum may be reordered into SIMD lanes


def test_parallel_pragma_on_vector_loops_that_move_a_megabyte() -> None:
    """A vector kernel's ops count once per vector: a sum of 8 partials of 36,864 floats (a conv weight gradient's)
    does 1/16 of parallel_threshold's ops but reads 1.2 MB, which two cores stream twice as fast; 8 x 4,096 don't.
    The loop over the 8 partials around the tile of vector accumulators is unrolled (unroll_reduce_max)."""
    from fusegrad import Tensor

    for n, threads in ((36864, True), (4096, False)):
        (ast,) = [i.ast for i in Tensor.empty(8, n).sum(0).schedule() if i.ast.op is Ops.SINK]
        src = to_program(ast, CLANG).src
        assert "float16" in src or "float8" in src  # vector accumulators: the op count alone stays under the bar
        assert ("#pragma omp parallel for" in src) is threads
        assert "#pragma GCC unroll 8\n" in src


def test_simd_loops_of_whole_wide_vectors_ask_for_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A simd loop whose trip count is a multiple of 16 asks for a whole 64-byte vector per step on AVX-512 hosts (gcc
    picks 32 there on its own): `simdlen(FG_SIMDLEN)`, defined by the preamble; a loop of 26 stays at gcc's choice.
    (An exp2 loop where the vector exp2 is vector code is vector code itself: codegen's exp_vector_opts.)"""
    monkeypatch.setattr(vectorize, "vector_exp2", lambda: False)
    for n, wide in ((1024, True), (26, False)):
        r0 = rng(n, 0)
        src = to_program(UOp.sink(glob(0, n).index(r0).store(glob(1, n).index(r0).load().exp2())), CLANG).src
        assert ("#pragma omp simd simdlen(FG_SIMDLEN)" in src) is wide
        assert src.startswith("#ifdef __AVX512F__\n#define FG_SIMDLEN 16\n") is wide


@needs_cc
def test_simdlen_takes_glibcs_widest_exp2f_on_avx512(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On an AVX-512 host the loop's exp2f is libmvec's 16-lane variant (no 8-lane one), where the loop stays a simd
    loop (no vector exp2: exp_vector_opts leaves it)."""
    monkeypatch.setattr(vectorize, "vector_exp2", lambda: False)
    from fusegrad.runtime.support.compiler_cpu import compiler_flags

    macros = subprocess.run(["cc", "-march=native", "-dM", "-E", "-"], input=b"", capture_output=True, check=True)
    if b"__AVX512F__" not in macros.stdout:  # conftest pins vectorize's answer: ask the compiler
        pytest.skip("no AVX-512 on this host")
    r0 = rng(1024, 0)
    src = to_program(UOp.sink(glob(0, 1024).index(r0).store(glob(1, 1024).index(r0).load().exp2())), CLANG).src
    flags = [f for f in compiler_flags() if f not in ("-shared", "-")]
    asm = subprocess.run(["cc", *flags, "-S", "-o", "-", "-"], input=src.encode(), capture_output=True, check=True)
    text = asm.stdout.decode()
    if "_ZGV" not in text:
        pytest.skip("no libmvec on this host")
    assert "_ZGVeN16v_exp2f" in text
    assert "_ZGVdN8v_exp2f" not in text


@Context(NOOPT=1)  # the pragmas of the plain lowering; GROUP's split is tested in test/codegen/test_opt.py
def test_full_reduce_gets_a_simd_reduction_and_no_threads() -> None:
    r0 = rng(1 << 20, 0, AxisType.REDUCE)
    total = glob(1, 1 << 20).index(r0).load().reduce(r0, arg=Ops.ADD)
    src = to_program(UOp.sink(glob(0, 1).index(UOp.const(dtypes.index, 0)).store(total)), CLANG).src
    assert "#pragma omp simd reduction(+:acc0)" in src
    assert "parallel" not in src


@Context(NOOPT=1)  # the pragmas of the plain lowering; GROUP's split is tested in test/codegen/test_opt.py
def test_max_reduce_keeps_its_order() -> None:
    """MAX propagates NaN in our C; an OpenMP max reduction need not, so max loops get no reduction pragma (the
    max runs in lanes of its own order instead: codegen/linearize.max_lanes)."""
    r0 = rng(1 << 20, 0, AxisType.REDUCE)
    top = glob(1, 1 << 20).index(r0).load().reduce(r0, arg=Ops.MAX)
    src = to_program(UOp.sink(glob(0, 1).index(UOp.const(dtypes.index, 0)).store(top)), CLANG).src
    assert "reduction" not in src
    assert "acc0[16]" in src


def test_hoisted_values_get_variables_outside_the_loop() -> None:
    r0, r1 = rng(4, 0), rng(8, 1)
    scaled = glob(1, 4).index(r0).load() * 3.0
    store = glob(0, 32).index(r0 * 8 + r1).store(scaled + glob(2, 32).index(r0 * 8 + r1).load())
    src = to_program(UOp.sink(store), CLANG).src
    assert src.index("float alu") < src.index("for (long long ridx1")


# *** compile and run: each op against the IR's own meaning (exec_alu), and the loop shapes ***

N_ALU = 64
UNARY_FLOAT = [Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC]
BINARY_FLOAT = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.POW]
BINARY_INT = [Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR,
              Ops.XOR, Ops.SHL, Ops.SHR]  # fmt: skip


def operands(op: Ops, dt: DType, slot: int) -> np.ndarray:
    """Inputs where C and the IR agree (no division by 0, no shift past the width, no signed overflow)."""
    np_dt = _to_np_dtype(dt)
    if dtypes.is_float(dt):
        values = rand.uniform(0.1, 4.0, N_ALU) if op in (Ops.LOG2, Ops.SQRT, Ops.POW) else rand.uniform(-4, 4, N_ALU)
        return values.astype(np_dt)
    if op in (Ops.SHL, Ops.SHR) and slot == 2:
        return rand.integers(0, 7, N_ALU).astype(np_dt)
    low = 1 if op in (Ops.IDIV, Ops.MOD, Ops.SHL) and (slot == 2 or op is Ops.SHL) else -100
    values = rand.integers(max(low, int(dtypes.min(dt)), -100), min(100, int(dtypes.max(dt))), N_ALU)
    if op in (Ops.IDIV, Ops.MOD) and slot == 2 and not dtypes.is_unsigned(dt):
        values = values * rand.choice([-1, 1], N_ALU)  # C truncation toward zero on negative divisors
    return values.astype(np_dt)


def run_alu(
    ops: list[Ops], dt: DType, tmp_path: pathlib.Path, make_operands: Callable[[Ops, DType, int], np.ndarray] = operands
) -> None:
    """One kernel with a store per op (outputs in slots 0.., then each op's inputs), checked lane by lane."""
    from fusegrad.uop.alu import exec_alu

    r0 = rng(N_ALU, 0)
    stores, outs, inputs, expected = [], [], [], []
    for i, op in enumerate(ops):
        args = [make_operands(op, dt, k + 1) for k in range(1 if op in UNARY_FLOAT else 2)]
        loads = [glob(len(ops) + len(inputs) + k, N_ALU, dt).index(r0).load() for k in range(len(args))]
        inputs.extend(args)
        out_dt = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt
        stores.append(glob(i, N_ALU, out_dt).index(r0).store(UOp(op, out_dt, tuple(loads))))
        outs.append(np.zeros(N_ALU, _to_np_dtype(out_dt)))
        values = [exec_alu(op, out_dt, tuple(x[j].item() for x in args)) for j in range(N_ALU)]
        expected.append(np.array(values, _to_np_dtype(out_dt)))
    compile_program(to_program(UOp.sink(*stores), CLANG), tmp_path)(*outs, *inputs)
    for op, out, want in zip(ops, outs, expected, strict=True):
        np.testing.assert_allclose(out, want, rtol=2e-6, atol=1e-6, err_msg=f"{op} on {dt}")


@needs_cc
@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64])
def test_float_ops_run_like_exec_alu(dt: DType, tmp_path: pathlib.Path) -> None:
    run_alu(UNARY_FLOAT + BINARY_FLOAT, dt, tmp_path)


@needs_cc
@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.uint8, dtypes.int64, dtypes.int8, dtypes.uint32])
def test_int_ops_run_like_exec_alu(dt: DType, tmp_path: pathlib.Path) -> None:
    run_alu(BINARY_INT, dt, tmp_path)


def edge_operands(op: Ops, dt: DType, slot: int) -> np.ndarray:
    """Inputs where C alone has no answer: zero and -1 divisors, INT_MIN, shift counts outside [0, bits)."""
    info = np.iinfo(_to_np_dtype(dt))
    if op in (Ops.SHL, Ops.SHR) and slot == 2:
        values = [-1, 0, 1, dt.bitsize - 1, dt.bitsize, dt.bitsize + 3, 63, 64, 100]
    elif slot == 2:
        values = [0, -1, 1, 2, -3, int(info.min), int(info.max)]
    else:
        values = [int(info.min), int(info.max), 0, -1, 1, 7, -7, int(info.min) + 1]
    picked = [v for v in values if info.min <= v <= info.max]
    return np.array([picked[i % len(picked)] for i in rand.permutation(N_ALU)], dtype=info.dtype)


@needs_cc
@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.int64, dtypes.int8, dtypes.int16, dtypes.uint8, dtypes.uint32,
                                dtypes.uint64])  # fmt: skip
def test_int_ops_on_edge_values_run_like_exec_alu(dt: DType, tmp_path: pathlib.Path) -> None:
    # x // 0, INT_MIN // -1, x << 40: guarded in the C (KERNEL_IR.md §5), so they neither trap nor differ
    run_alu([Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR, Ops.NEG], dt, tmp_path, edge_operands)


@needs_cc
@pytest.mark.parametrize("src", [dtypes.float16, dtypes.float32, dtypes.float64])
def test_float_to_int_casts_run_like_float_to_int(src: DType, tmp_path: pathlib.Path) -> None:
    from fusegrad.uop.alu import float_to_int

    special = [math.nan, math.inf, -math.inf, 1e20, -1e20, 3.7, -3.7, 300.7, -1.5, 2.0**31, -(2.0**31) - 5000, 2.0**32,
               2.0**63, -(2.0**63), 2.0**64, 1e19, 65535.9, -0.0, 1e-40]  # fmt: skip
    with np.errstate(over="ignore"):
        x = np.array(special, dtype=_to_np_dtype(src))
    r0 = rng(len(special), 0)
    targets = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32,
               dtypes.uint64]  # fmt: skip
    load = glob(len(targets), len(special), src).index(r0).load()
    stores = [glob(i, len(special), dt).index(r0).store(load.cast(dt)) for i, dt in enumerate(targets)]
    outs = [np.zeros(len(special), _to_np_dtype(dt)) for dt in targets]
    compile_program(to_program(UOp.sink(*stores), CLANG), tmp_path)(*outs, x)
    for dt, out in zip(targets, outs, strict=True):
        assert out.tolist() == [float_to_int(float(v), dt) for v in x], f"{src} -> {dt}"


def rendered(t: object) -> str:
    """The C of a Tensor's last kernel."""
    from fusegrad.engine.realize import get_program

    asts = [ei.ast for ei in t.schedule() if ei.ast.op is Ops.SINK]  # type: ignore[attr-defined]  # a Tensor
    return get_program(asts[-1], CLANG).src


def has_guard(src: str) -> bool:
    return "==0)?" in src or "==(-1))?" in src or ">=(-" in src


def test_index_math_renders_without_guards() -> None:
    from fusegrad import Tensor

    moved = Tensor.arange(24).reshape(2, 3, 4).permute(2, 0, 1)[1:3].pad(((0, 0), (1, 1), (0, 0))).flip(0)
    assert not has_guard(rendered(moved.contiguous()))
    assert not has_guard(rendered(Tensor.ones(6, 8).sum(axis=1)))
    assert not has_guard(rendered(Tensor.ones(4, 6)[Tensor([0, 3, -1])]))
    assert not has_guard(rendered(Tensor([7, -9, 5]) // 4))  # a constant divisor other than 0 and -1


def test_divisions_that_can_trap_are_guarded() -> None:
    from fusegrad import Tensor

    src = rendered(Tensor([1, 2], dtype=dtypes.int32).idiv(Tensor([0, 1], dtype=dtypes.int32)))
    assert "==0)?0:" in src
    assert "==(-1))?(-" in src  # INT_MIN // -1 wraps instead of trapping
    assert "==(-1)" not in rendered(Tensor([1, 2], dtype=dtypes.uint32).idiv(Tensor([0, 1], dtype=dtypes.uint32)))


def test_a_constant_zero_divisor_is_folded_before_c() -> None:
    from fusegrad import Tensor

    for t in (Tensor([1, 2], dtype=dtypes.int64) // 0, Tensor([1, 2], dtype=dtypes.int64) % 0):
        body = rendered(t).split("#endif")[-1]
        assert "/" not in body
        assert "%" not in body
        assert "= 0ll;" in body


def test_float_to_int_casts_are_guarded_unless_bounds_fit() -> None:
    from fusegrad import Tensor

    assert has_guard(rendered(Tensor([1.5, 2.5]).cast(dtypes.int32)))
    assert not has_guard(rendered(Tensor([1, 2], dtype=dtypes.int16).cast(dtypes.float32).exp2().cast(dtypes.bool)))
    # int32 -> float32 rounds 2**31 - 1 up to 2**31, which doesn't fit: the bounds know it
    assert has_guard(rendered(Tensor([1, 2], dtype=dtypes.int32).cast(dtypes.float32).cast(dtypes.int32)))


def test_small_int_results_are_cast_back() -> None:
    from fusegrad import Tensor

    a, b = Tensor([100], dtype=dtypes.int8), Tensor([100], dtype=dtypes.int8)
    assert "((signed char)((val" in rendered((a + b) < 0)


def run(ast: UOp, tmp_path: pathlib.Path, *args: np.ndarray | int) -> ProgramSpec:
    prg = to_program(ast, CLANG)
    compile_program(prg, tmp_path)(*args)
    return prg


@needs_cc
def test_symbolic_size_writes_only_n(tmp_path: pathlib.Path) -> None:
    ast, (a,), _ = kernel_symbolic()
    out = np.full(64, -1.0, np.float32)
    run(ast, tmp_path, out, a, 10)
    np.testing.assert_allclose(out[:10], a[:10] * 3)
    assert (out[10:] == -1).all()


@needs_cc
def test_shared_and_hoisted_and_nested_reduces_run(tmp_path: pathlib.Path) -> None:
    r0, r1, r2 = rng(4, 0), rng(8, 1, AxisType.REDUCE), rng(5, 2, AxisType.REDUCE)
    a, b, c = floats(32), floats(8), floats(40)
    rows = glob(1, 32).index(r0 * 8 + r1).load().reduce(r1, arg=Ops.ADD)  # a.sum(1): in r0
    whole = glob(2, 8).index(r1).load().reduce(r1, arg=Ops.ADD)  # b.sum(): shares r1, moves into r0
    inner = glob(3, 40).index(r1 * 5 + r2).load().reduce(r2, arg=Ops.MAX)  # c.max(1) per r1
    nested = (glob(2, 8).index(r1).load() * inner).reduce(r1, arg=Ops.ADD)  # (b * c.max(1)).sum()
    out = np.zeros(4, np.float32)
    run(UOp.sink(glob(0, 4).index(r0).store(rows * whole + nested)), tmp_path, out, a, b, c)
    expected = a.reshape(4, 8).sum(1) * b.sum() + (b * c.reshape(8, 5).max(1)).sum()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)  # sums of random signs can cancel


@needs_cc
def test_two_stores_and_a_hoisted_reduce_run(tmp_path: pathlib.Path) -> None:
    r0, r1, r2 = rng(6, 0), rng(3, 1), rng(8, 2, AxisType.REDUCE)
    a, b = floats(6), floats(8)
    total = glob(3, 8).index(r2).load().reduce(r2, arg=Ops.MUL)
    first = glob(0, 6).index(r0).store(glob(2, 6).index(r0).load() + total)
    second = glob(1, 3).index(r1).store(r1.cast(dtypes.float32) * 2.0)
    out0, out1 = np.zeros(6, np.float32), np.zeros(3, np.float32)
    run(UOp.sink(first, second), tmp_path, out0, out1, a, b)
    np.testing.assert_allclose(out0, a + b.prod(), rtol=1e-5)
    np.testing.assert_allclose(out1, [0, 2, 4])


@needs_cc
def test_gated_store_and_special_constants_run(tmp_path: pathlib.Path) -> None:
    r0 = rng(8, 0)
    specials = (r0 < 2).where(UOp.const(dtypes.float32, math.inf), (r0 < 4).where(UOp.const(dtypes.float32, -0.0),
                UOp.const(dtypes.float32, math.nan)))  # fmt: skip
    ast = UOp.sink(glob(0, 8).index(r0, r0 < 6).store(specials))
    out = np.full(8, 7.0, np.float32)
    run(ast, tmp_path, out)
    assert out[:2].tolist() == [math.inf] * 2
    assert np.signbit(out[2:4]).all()
    assert out[2:4].tolist() == [0.0, 0.0]
    assert np.isnan(out[4:6]).all()
    assert out[6:].tolist() == [7.0, 7.0]


@needs_cc
def test_casts_bitcast_half_and_bool_run(tmp_path: pathlib.Path) -> None:
    r0 = rng(16, 0)
    x = glob(4, 16).index(r0).load()
    half = x.cast(dtypes.float16) + UOp.const(dtypes.float16, 0.5)
    ast = UOp.sink(
        glob(0, 16, dtypes.int32).index(r0).store(x.bitcast(dtypes.int32)),
        glob(1, 16, dtypes.float16).index(r0).store(half),
        glob(2, 16, dtypes.bool).index(r0).store(x.cast(dtypes.bool) & (x < 0.5)),
        glob(3, 16, dtypes.uint8).index(r0).store((x * 100.0).cast(dtypes.int32).cast(dtypes.uint8)),
    )
    a = floats(16)
    a[0] = 0.0
    outs = [np.zeros(16, np.int32), np.zeros(16, np.float16), np.zeros(16, np.bool_), np.zeros(16, np.uint8)]
    run(ast, tmp_path, *outs, a)
    np.testing.assert_array_equal(outs[0], a.view(np.int32))
    np.testing.assert_allclose(outs[1], a.astype(np.float16) + np.float16(0.5), rtol=1e-3)
    np.testing.assert_array_equal(outs[2], (a != 0) & (a < 0.5))
    np.testing.assert_array_equal(outs[3], (a * 100).astype(np.int32).astype(np.uint8))


@needs_cc
def test_parallel_kernel_runs(tmp_path: pathlib.Path) -> None:
    n = 1 << 18
    r0, r1 = rng(n // 64, 0), rng(64, 1, AxisType.REDUCE)
    rows = (glob(1, n).index(r0 * 64 + r1).load() * 2.0).reduce(r1, arg=Ops.ADD)
    a, out = floats(n), np.zeros(n // 64, np.float32)
    prg = run(UOp.sink(glob(0, n // 64).index(r0).store(rows)), tmp_path, out, a)
    assert "omp parallel for" in prg.src
    np.testing.assert_allclose(out, (a * 2).reshape(-1, 64).sum(1), rtol=1e-4, atol=1e-4)


@needs_cc
def test_symbolic_sizes_in_two_loops_run(tmp_path: pathlib.Path) -> None:
    n, m = UOp.variable("n", 1, 8), UOp.variable("m", 1, 8)
    r0, r1 = rng(n, 0), rng(m, 1)  # out[:n, :m] of an (8, 8) buffer = a + m
    value = glob(1, 64).index(r0 * 8 + r1).load() + m.cast(dtypes.float32)
    a, out = floats(64), np.zeros(64, np.float32)
    prg = run(UOp.sink(glob(0, 64).index(r0 * 8 + r1).store(value)), tmp_path, out, a, 5, 3)  # vars by name: m, n
    assert prg.name == "E_n_m"
    assert "  #pragma omp simd\n    for (long long ridx1 = 0; ridx1 < m;" in prg.src
    expected = np.zeros((8, 8), np.float32)
    expected[:3, :5] = a.reshape(8, 8)[:3, :5] + 5
    np.testing.assert_allclose(out.reshape(8, 8), expected)


@needs_cc
@settings(max_examples=12, deadline=None)
@given(rows=st.integers(1, 5), cols=st.integers(1, 6), transpose=st.booleans(), pad=st.integers(0, 2),
       op=st.sampled_from([None, Ops.ADD, Ops.MAX]), scale=st.floats(-3, 3, width=32))  # fmt: skip
def test_random_kernels_run_like_numpy(rows: int, cols: int, transpose: bool, op: Ops | None, scale: float,
                                       pad: int) -> None:  # fmt: skip
    """out = reduce?(pad(a or a.T) * scale + 1, axis 1): loops, reduce lowering, gates and hoisting together."""
    a = floats(rows, cols)
    view = a.T if transpose else a  # (h, w)
    h, w = view.shape
    r0 = rng(h, 0)
    r1 = rng(w + 2 * pad, 1, AxisType.LOOP if op is None else AxisType.REDUCE)
    col = r1 - pad
    idx = col * cols + r0 if transpose else r0 * cols + col
    valid = (r1 >= pad) & (r1 < w + pad)
    value = glob(1, rows * cols).index(idx, valid).load() * scale + 1.0
    padded = np.pad(view, ((0, 0), (pad, pad))) * np.float32(scale) + 1
    if op is None:
        ast, expected = UOp.sink(glob(0, h * (w + 2 * pad)).index(r0 * (w + 2 * pad) + r1).store(value)), padded
    else:
        ast = UOp.sink(glob(0, h).index(r0).store(value.reduce(r1, arg=op)))
        expected = padded.sum(1) if op is Ops.ADD else padded.max(1)
    out = np.zeros(expected.size, np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        run(ast, pathlib.Path(tmp), out, a)
    np.testing.assert_allclose(out, expected.reshape(-1), rtol=1e-5, atol=1e-5)


_ODD_TILE = """
import numpy as np
from test.codegen.test_opt import matmul, run, with_opts
from fusegrad.codegen.opt import Opt, OptOps
from fusegrad.dtype import dtypes
ast, inputs, expected = matmul(8, 5, 12, dtypes.int32)
opts = (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 3), Opt(OptOps.SWAP, 0, 1))
print(np.array_equal(run(with_opts(ast, opts), inputs, expected.size, dtypes.int32, "CPU"), expected))
"""


def test_odd_upcast_tile_compiles_to_code_that_runs() -> None:
    """A 4x3 int32 matmul tile: gcc 12.2 turned `omp simd` on its 3-long set-up loop into code that segfaulted (the
    CI run's crashed worker), so short loops of 3, 5, 6 or 7 get no `omp simd`. Run in a child: a crash fails here."""
    root = pathlib.Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-c", _ODD_TILE]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=root, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "True"


_HALF_ACCUMULATORS = """
import numpy as np
from test.codegen.test_opt import matmul, run
from fusegrad.dtype import dtypes
for cols in (40, 120, 200, 1000):  # the heuristic's 4x8 tile of half accumulators, no threads
    ast, inputs, expected = matmul(4, 5, cols, dtypes.float16)
    got = run(ast, inputs, expected.size, dtypes.float16, "CPU")
    print(np.allclose(got.astype(np.float64), expected, rtol=2e-2, atol=2e-1))
"""


def test_half_accumulator_arrays_are_aligned_for_gcc() -> None:
    """Half matmuls with a register tile and no threads: gcc 12.2 (-mno-avx512fp16) put the accumulator array in the
    red zone 8 bytes off a 16-byte boundary and read it with aligned vector loads (a segfault), so half arrays are
    declared 32-byte aligned. Run in a child: a crash fails here."""
    from test.codegen.test_opt import matmul  # the codegen tests' case builder

    src = to_program(matmul(4, 5, 1000, dtypes.float16)[0], ClangRenderer()).src
    assert "_Float16 acc0[32] __attribute__((aligned(32)));" in src
    root = pathlib.Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-c", _HALF_ACCUMULATORS]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=root, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True"] * 4


def test_strided_gated_load_takes_an_int_subscript() -> None:
    # a stride-2 conv's padded input, packed per row: its gated load steps by 2 along the copy loop, so its subscript
    # is cast to int (gcc vectorises that as a masked gather; a 64-bit one stayed scalar); the unit-stride gated load
    # of a stride-1 conv keeps the 64-bit subscript (a masked vector load)
    from test.codegen.test_opt import check, conv1d_strided

    def source(step: int) -> str:
        ast = conv1d_strided(2, 16, 16, 32, step, 1, dtypes.float32)[0]
        return to_program(ast.replace(arg=KernelInfo()), ClangRenderer()).src

    strided = source(2)
    assert "[(int)" in strided
    gathered = next(line for line in strided.splitlines() if "[(int)" in line)
    assert "?data1[(int)" in gathered  # the input, under its gate
    assert "[(int)" not in source(1)
    for step in (1, 2, 3):
        check(conv1d_strided(2, 16, 16, 32, step, 1, dtypes.float32), dtypes.float32, "CPU", None, exact=True)


# *** fused multiply-add (codegen/fma.py's MULACC) ***

_host_has_fma = cstyle.host_has_fma  # the real host's answer (conftest makes every test see FMA)


def test_mulacc_spellings() -> None:
    lang = ClangRenderer()
    assert lang.render_fma("a", "b", "c", dtypes.float32) == "__builtin_fmaf(a,b,c)"
    assert lang.render_fma("a", "b", "c", dtypes.float64) == "__builtin_fma(a,b,c)"
    assert lang.render_fma("a", "b", "c", dtypes.float32.vec(16)) == "fg_fma_float16(a,b,c)"


def _mulacc_kernel(dt: DType) -> UOp:
    r0 = rng(8, 0)
    x, y, z = (glob(slot, 8, dt).index(r0).load() for slot in (1, 2, 3))
    return UOp.sink(glob(0, 8, dt).index(r0).store(UOp(Ops.MULACC, dt, (x, y, z))))


def test_int_mulacc_is_a_wrapped_multiply_add_and_half_has_none() -> None:
    assert "((val0*val1)+val2)" in to_program(_mulacc_kernel(dtypes.int32), ClangRenderer()).src
    with pytest.raises(NotImplementedError, match=r"MULACC of dtypes\.half has no single-rounding spelling"):
        to_program(_mulacc_kernel(dtypes.float16), ClangRenderer())


_FMA_HARNESS = """
void fused(float* restrict out, const float* restrict a, const float* restrict b, const float* restrict c) {
  for (int i = 0; i < 64; i += 16) {
    float16 x, y, z;
    for (int j = 0; j < 16; j++) { x[j] = a[i + j]; y[j] = b[i + j]; z[j] = c[i + j]; }
    float16 r = fg_fma_float16(x, y, z);
    for (int j = 0; j < 16; j++) out[i + j] = r[j];
  }
}
"""


@needs_cc
@pytest.mark.parametrize("march", ["native", "x86-64"])  # the x86 builtin where the host has it; fmaf lane by lane
def test_vector_fma_helper_rounds_once(march: str, tmp_path: pathlib.Path) -> None:
    from fusegrad.renderer.cstyle import render_fma_helpers, render_vector_typedefs

    vec = UOp(Ops.MULACC, dtypes.float32.vec(16), ())
    src = render_vector_typedefs([vec], ClangRenderer()) + render_fma_helpers([vec], ClangRenderer()) + _FMA_HARNESS
    lib = tmp_path / "fma.so"
    cmd = ["cc", "-O2", f"-march={march}", "-ffp-contract=off", "-shared", "-fPIC", "-x", "c", "-", "-o", str(lib)]
    subprocess.run(cmd, input=src.encode(), check=True, capture_output=True)
    # (1 + 2**-12 + i ulp)**2 + tiny: just above a float32 tie, where a rounded product followed by an add goes wrong
    a = (np.float32(1 + 2**-12) + np.arange(64, dtype=np.float32) * np.float32(2**-23)).astype(np.float32)
    c = np.full(64, 2.0**-60, np.float32)
    out = np.zeros(64, np.float32)
    ctypes.CDLL(str(lib)).fused(*(ctypes.c_void_p(x.ctypes.data) for x in (out, a, a, c)))
    libm = ctypes.CDLL("libm.so.6")
    libm.fmaf.restype, libm.fmaf.argtypes = ctypes.c_float, [ctypes.c_float] * 3
    expected = np.array([libm.fmaf(float(x), float(x), float(z)) for x, z in zip(a, c, strict=True)], np.float32)
    np.testing.assert_array_equal(out, expected)
    assert not np.array_equal(out, a * a + c)  # two roundings differ on this data


@needs_cc
def test_fused_matmul_tile_compiles_to_vector_fma_instructions() -> None:
    """The tiled matmul's accumulator updates are vfmadd on ymm registers with the runtime's flags (-march=native,
    -ffp-contract=off): the helper inlines, and nothing else in the tile multiplies or adds."""
    from fusegrad.runtime.support.compiler_cpu import compiler_flags

    if not _host_has_fma():
        pytest.skip("no FMA instructions on this host")
    src = to_program(CANONICAL["matmul_tiled"]()[0], ClangRenderer()).src
    flags = [f for f in compiler_flags() if f not in ("-shared", "-")]
    asm = subprocess.run(["cc", *flags, "-S", "-o", "-", "-"], input=src.encode(), capture_output=True, check=True)
    lines = asm.stdout.decode().splitlines()
    assert any("vfmadd" in line and "ymm" in line for line in lines)
    assert not any(line.split()[:1] in (["vmulps"], ["vaddps"]) for line in lines)
