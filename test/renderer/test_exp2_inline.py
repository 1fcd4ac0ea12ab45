"""The CPU renderer's inline float exp2 (`fg_exp2f`, cstyle._EXP2F_HELPER): what a kernel runs where glibc's libmvec
does not link. Kernels are compiled here with the runtime's flags less the libmvec ones and run through ctypes: the
scalar loop (vectorised by `omp simd`), a loop too short for `omp simd`, and explicit float vectors (the helpers' lane
loop) must agree bit for bit and stay within an ulp of float64's exp2 over the whole float32 range, edges included.
"""

from __future__ import annotations

import ctypes
import pathlib
import platform
import shutil
import subprocess

import numpy as np
import pytest

from fusegrad.codegen import to_program, vectorize
from fusegrad.codegen.vectorize import host_vector_bytes
from fusegrad.dtype import DType, dtypes
from fusegrad.renderer import ProgramSpec
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.runtime.support import compiler_cpu
from fusegrad.uop import AxisType, Ops
from fusegrad.uop.ops import UOp

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on PATH")

# inputs whose exp2 is exact, or an edge: overflow at 128, the last normal 2^-126, denormals down to 2^-149, the
# halfway point -150 (rounds to 0, to even), and the specials
EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 127.99, 127.999992, 128.0, 128.5, 200.0, 1e30, -126.0, -126.5, -140.3,
         -149.0, -149.5, -149.99, -150.0, -150.5, -151.0, -1e30, 1e-30, -1e-30, 0.5, -0.5, 1.0, 1e-45]  # fmt: skip


def _global(slot: int, size: int, dt: DType = dtypes.float32) -> UOp:
    return UOp(Ops.DEFINE_GLOBAL, dt.ptr(size), arg=slot)


def exp2_program(n: int, lanes: int = 1, dt: DType = dtypes.float32) -> ProgramSpec:
    """out[i] = exp2(in[i]) over n elements: a loop of scalars, or of `lanes`-wide vectors (explicit vector nodes)."""
    r0 = UOp.range(n // lanes, 0, AxisType.LOOP)
    src = _global(1, n, dt).index(r0 * lanes)
    value = UOp(Ops.LOAD, dt.vec(lanes), (src,)) if lanes > 1 else src.load()
    return to_program(UOp.sink(_global(0, n, dt).index(r0 * lanes).store(value.exp2())), ClangRenderer())


def inline_flags() -> list[str]:
    """The CPU runtime's compiler flags without libmvec, so `fg_exp2f` is the inline form."""
    return [f for f in compiler_cpu.compiler_flags() if f not in compiler_cpu.vector_math_flags()]


def build(src: str, tmp_path: pathlib.Path, name: str, flags: list[str] | None = None) -> ctypes.CDLL:
    lib = tmp_path / f"{name}.so"
    cmd = ["cc", *(f for f in (inline_flags() if flags is None else flags) if f != "-"), "-o", str(lib), "-"]
    subprocess.run(cmd, input=src.encode(), check=True, capture_output=True)
    return ctypes.CDLL(str(lib))


def run_exp2(x: np.ndarray, tmp_path: pathlib.Path, lanes: int = 1, flags: list[str] | None = None) -> np.ndarray:
    prg = exp2_program(len(x), lanes, dtypes.float32)
    out = np.empty_like(x)
    getattr(build(prg.src, tmp_path, f"{prg.function_name}_{lanes}", flags), prg.function_name)(
        ctypes.c_void_p(out.ctypes.data), ctypes.c_void_p(x.ctypes.data)
    )
    return out


def ulps(got: np.ndarray, x: np.ndarray) -> np.ndarray:
    """|got - exp2(x)| in float32 ulps of the float64 exp2 (denormal spacing below 2^-126; 0 where both are the same
    inf or NaN)."""
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.exp2(x.astype(np.float64))
        spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
        err = np.abs(got.astype(np.float64) - want) / spacing
        rounded = want.astype(np.float32)  # inf where float32 overflows: then got must be inf
    same = (np.isnan(got) & np.isnan(want)) | (got == rounded)
    return np.where(same, 0.0, np.where(np.isinf(rounded) | np.isinf(got), np.inf, err))


def sample_inputs(n: int, seed: int = 0) -> np.ndarray:
    """float32s spread over the range where exp2 goes from 0 through denormals to inf, random bit patterns (every
    exponent, NaNs included) and the edges."""
    rng = np.random.default_rng(seed)
    spread = rng.uniform(-160.0, 140.0, n // 2).astype(np.float32)
    bits = rng.integers(0, 2**32, n // 2, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return np.concatenate([spread, bits, np.array(EDGES, dtype=np.float32)]).astype(np.float32)


def test_source_uses_the_inline_exp2_without_libmvec(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel calls `fg_exp2f`, defined inline unless FUSEGRAD_MVEC (libmvec links) says to take glibc's exp2f
    (its simd loop, where the host has no vector exp2 for exp_vector_opts)."""
    monkeypatch.setattr(vectorize, "vector_exp2", lambda: False)
    src = exp2_program(1024).src
    body = src[src.index("void E_") :]
    assert "fg_exp2f(val0)" in body
    assert "__builtin_exp2f(" not in body
    assert "#ifdef FUSEGRAD_MVEC\n#define fg_exp2f __builtin_exp2f\n#else" in src
    assert "static inline float fg_exp2f(float x) {" in src
    assert "__builtin_exp2(" in exp2_program(64, dt=dtypes.float64).src  # double keeps libm's


def test_inline_exp2_is_vectorised_and_calls_no_libm() -> None:
    """Compiled as the runtime does without libmvec: no exp2f call left, and the loop is SIMD (packed fma or mul)."""
    cmd = ["cc", *(f for f in inline_flags() if f not in ("-shared", "-")), "-S", "-o", "-", "-"]
    asm = subprocess.run(cmd, input=exp2_program(1024).src.encode(), capture_output=True, check=True).stdout.decode()
    assert "exp2f" not in asm
    if platform.machine() == "x86_64":  # -march=native: AVX at least
        assert any(op in asm for op in ("vfmadd132ps", "vfmadd213ps", "vfmadd231ps", "vmulps"))


def test_within_an_ulp_of_float64(tmp_path: pathlib.Path) -> None:
    """Sampled float32 inputs, edges included: every result within 1.5 ulp of float64's exp2 (an exhaustive run over all
    2^32 inputs measured 0.88 ulp with fma, 1.08 without)."""
    x = sample_inputs(1 << 20)
    err = ulps(run_exp2(x, tmp_path), x)
    assert err.max() <= 1.5, (x[err.argmax()], err.max())


def test_edges(tmp_path: pathlib.Path) -> None:
    got = dict(zip(EDGES, run_exp2(np.array(EDGES, dtype=np.float32), tmp_path).tolist(), strict=True))
    assert got[0.0] == got[-0.0] == got[1e-30] == got[-1e-30] == 1.0
    assert got[np.inf] == got[128.0] == got[128.5] == got[200.0] == got[1e30] == np.inf
    assert got[-np.inf] == got[-150.0] == got[-150.5] == got[-151.0] == got[-1e30] == 0.0
    assert np.isnan(got[np.nan])
    assert got[-126.0] == 2.0**-126
    assert got[-149.0] == got[-149.5] == 2.0**-149  # -149.5: 0.71 * 2^-149 rounds up to the least denormal
    assert got[127.999992] == np.float32(np.exp2(np.float64(np.float32(127.999992))))


def test_integers_give_exact_powers_of_two(tmp_path: pathlib.Path) -> None:
    k = np.arange(-149, 128, dtype=np.float32)
    np.testing.assert_array_equal(run_exp2(k, tmp_path), np.exp2(k.astype(np.float64)).astype(np.float32))


@pytest.mark.parametrize("lanes", [8, 16])
def test_vectors_and_short_loops_match_the_simd_loop(tmp_path: pathlib.Path, lanes: int) -> None:
    """The explicit vector helper's lane loop, and a loop of 7 that gets no `omp simd` (scalar code), compute the same
    bits as the vectorised scalar loop."""
    x = sample_inputs(1 << 12, seed=1)[: 1 << 12]
    simd = run_exp2(x, tmp_path)
    np.testing.assert_array_equal(run_exp2(x, tmp_path, lanes).view(np.uint32), simd.view(np.uint32))
    short = np.concatenate([run_exp2(x[i : i + 7], tmp_path) for i in range(0, 70, 7)])
    np.testing.assert_array_equal(short.view(np.uint32), simd[:70].view(np.uint32))


def test_kernels_joined_in_one_file_define_it_once(tmp_path: pathlib.Path) -> None:
    """The CPU compiler joins kernels into one C file (compiler_cpu.ClangCompiler.joins_sources): the guard keeps a
    second `fg_exp2f` out."""
    build(exp2_program(64).src + "\n" + exp2_program(128).src, tmp_path, "joined")


def test_half_computes_in_float(tmp_path: pathlib.Path) -> None:
    """half's exp2 runs the float helper and rounds once to half."""
    x = np.linspace(-20, 15, 64).astype(np.float16)
    prg = exp2_program(64, dt=dtypes.float16)
    out = np.empty_like(x)
    getattr(build(prg.src, tmp_path, "half"), prg.function_name)(
        ctypes.c_void_p(out.ctypes.data), ctypes.c_void_p(x.ctypes.data)
    )
    np.testing.assert_array_equal(out, np.exp2(x.astype(np.float64)).astype(np.float16))


@pytest.mark.skipif(host_vector_bytes() != 64, reason="the inline vector form is AVX-512's")
def test_avx512_vectors_are_inline_where_libmvec_links(tmp_path: pathlib.Path) -> None:
    """16 float32 lanes on AVX-512 run cstyle._EXP2_FLOAT16_AVX512 even where libmvec links (its call spills every
    vector register): with the runtime's own flags, no libmvec call and a vscalefps; the same bits as the inline
    scalar form lane for lane, so within its ulp of float64 over the sampled range, edges included."""
    flags = list(compiler_cpu.compiler_flags())
    cmd = ["cc", *(f for f in flags if f not in ("-shared", "-")), "-S", "-o", "-", "-"]
    src = exp2_program(1024, 16).src
    asm = subprocess.run(cmd, input=src.encode(), capture_output=True, check=True).stdout.decode()
    assert "_ZGVeN16v_exp2f" not in asm
    assert "exp2f" not in asm.replace("fg_exp2f", "")
    assert "vscalefps" in asm
    x = sample_inputs(1 << 20, seed=2)
    x = x[: len(x) // 16 * 16]
    got = run_exp2(x, tmp_path, 16, flags)
    np.testing.assert_array_equal(got.view(np.uint32), run_exp2(x, tmp_path).view(np.uint32))
    assert ulps(got, x).max() <= 1.5
