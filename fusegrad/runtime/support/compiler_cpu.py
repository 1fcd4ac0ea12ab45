"""The CPU backend's compiler: C source -> shared-object bytes, by the system C compiler (CPU_CC, else cc, gcc, clang).

Used by runtime/ops_cpu.py; binaries are cached on disk by Compiler.compile_cached, keyed by source, compiler and flags.
"""

from __future__ import annotations

import functools
import hashlib
import pathlib
import shutil
import subprocess
import tempfile

from fusegrad.device import CompileError, Compiler
from fusegrad.diskcache import CacheKey
from fusegrad.helpers import CPU_CC, CRASH_REPORT

DEFAULT_COMPILERS = ("cc", "gcc", "clang")  # tried in order when CPU_CC is unset
# -ffp-contract=off: no implicit fused multiply-add, so float results match the PYTHON device's one rounding per op;
# the only fmas are codegen's explicit MULACCs (codegen/fma.py), which PYTHON computes exactly too
# -fno-trapping-math -fno-math-errno: lets gcc vectorize selects and math calls (we never read fp flags or errno)
# -fwrapv: signed overflow wraps, the C semantics the IR defines (plain C leaves it undefined)
# no -funroll-loops: it made sdpa's kernels 1.18x faster, but with it this host's gcc 12 computed a wrong uint32
# column sum in an `omp simd` reduce loop of computed trip count, and emitted AVX512-FP16 masked moves (vmovsh) that
# binutils 2.40 cannot assemble (test/runtime/test_compiler_flags.py keeps both kernels)
CFLAGS = ("-O2", "-march=native", "-fPIC", "-shared", "-fopenmp", "-ffp-contract=off", "-fno-trapping-math",
          "-fno-math-errno", "-fwrapv", "-x", "c", "-")  # fmt: skip


@functools.cache
def vector_math_flags() -> tuple[str, ...]:
    """glibc's libmvec gives SIMD exp2/log2/sin: link it and tell the kernel preamble (FUSEGRAD_MVEC) to use it."""
    import ctypes.util

    return ("-DFUSEGRAD_MVEC", "-lmvec") if ctypes.util.find_library("mvec") is not None else ()


# a masked half-precision select: gcc 12 emits AVX512-FP16 `vmovsh` with masking that binutils 2.40 rejects
_HALF_PROBE_SRC = """void fusegrad_half_probe(_Float16* restrict a, const _Float16* restrict b) {
  #pragma omp simd
  for (long long i = 0; i < 3; i++) { _Float16 v = b[i]; a[i] = ((_Float16)0.0f < v) ? v : (_Float16)0.0f; }
}
"""


@functools.cache
def half_precision_flags() -> tuple[str, ...]:
    """`-mno-avx512fp16` where -march=native's AVX512-FP16 code doesn't assemble (found by compiling a probe)."""
    try:
        compiler = find_c_compiler()
    except RuntimeError:
        return ()  # no compiler: the first real compile says so
    with tempfile.TemporaryDirectory(prefix="fusegrad_cc_") as tmp:
        cmd = [compiler, *CFLAGS, "-o", str(pathlib.Path(tmp) / "probe.so")]
        proc = subprocess.run(cmd, input=_HALF_PROBE_SRC.encode(), capture_output=True, check=False)
    return ("-mno-avx512fp16",) if proc.returncode != 0 and b"vmovsh" in proc.stderr else ()


def compiler_flags() -> tuple[str, ...]:
    # no -fno-tree-loop-if-convert: gcc's folding of a pad's gated load into a whole-vector read is made safe by the
    # CPU allocator's guard bytes (ops_cpu.GUARD_BYTES), and without if-conversion padded convs stay scalar
    return (*CFLAGS, *vector_math_flags(), *half_precision_flags())


# CRASH_REPORT=1: the C sources of each binary compiled (or read from the cache), by the binary's sha256, so the CPU
# runtime, which only sees the binary, can print the source of the kernel it is about to run. A list: one binary built
# from joined sources (compile_cached_many) holds several kernels.
sources_by_binary: dict[bytes, list[str]] = {}


def kernel_source(lib: bytes, name: str) -> str | None:
    """The C source of kernel `name` in binary `lib`, if this process compiled or loaded it with CRASH_REPORT on."""
    sources = sources_by_binary.get(binary_digest(lib), [])
    return next((src for src in sources if f"void {name}(" in src), sources[0] if sources else None)


def _remember(srcs: list[str], libs: list[bytes]) -> None:
    for src, lib in zip(srcs, libs, strict=True):
        known = sources_by_binary.setdefault(binary_digest(lib), [])
        if src not in known:
            known.append(src)


def binary_digest(lib: bytes) -> bytes:
    return hashlib.sha256(lib).digest()


_PROBE_SRC = "void fusegrad_probe(float* restrict out) { out[0] = 1.0f; }\n"


def find_c_compiler() -> str:
    """Path of the C compiler to use. Raises RuntimeError naming what was looked for and how to get one."""
    wanted = [CPU_CC.value] if CPU_CC.value else list(DEFAULT_COMPILERS)
    for name in wanted:
        if (path := shutil.which(name)) is not None:
            return path
    looked_for = f"CPU_CC={CPU_CC.value}" if CPU_CC.value else ", ".join(wanted) + " on PATH"
    raise RuntimeError(
        f"CPU: no C compiler found: looked for {looked_for}; install one (e.g. `apt-get install gcc` or "
        "`apt-get install clang`) or set CPU_CC to a compiler's path"
    )


def _numbered(src: str) -> str:
    return "\n".join(f"{i:4d} | {line}" for i, line in enumerate(src.splitlines(), start=1))


class ClangCompiler(Compiler):
    """Runs the system C compiler (gcc or clang, via `cc` by default) with CFLAGS into a shared object."""

    joins_sources = True  # kernels with distinct names, joined into one C file, build one .so holding them all

    def __init__(self, cachekey: str | None = "compile_clang") -> None:
        super().__init__(cachekey)

    def cache_key(self, src: str) -> CacheKey:
        wanted = CPU_CC.value or DEFAULT_COMPILERS[0]
        return (src, shutil.which(wanted) or wanted, list(compiler_flags()))

    def compile_cached(self, src: str) -> bytes:
        lib = super().compile_cached(src)
        if CRASH_REPORT:
            _remember([src], [lib])
        return lib

    def compile_cached_many(self, srcs: list[str]) -> list[bytes]:
        libs = super().compile_cached_many(srcs)
        if CRASH_REPORT:
            _remember(srcs, libs)
        return libs

    def compile(self, src: str) -> bytes:
        """C source -> .so bytes. Raises CompileError holding the compiler's stderr and the numbered source."""
        compiler = find_c_compiler()
        with tempfile.TemporaryDirectory(prefix="fusegrad_cc_") as tmp:
            out = pathlib.Path(tmp) / "kernel.so"
            proc = subprocess.run(
                [compiler, *compiler_flags(), "-o", str(out)], input=src.encode(), capture_output=True, check=False
            )
            if proc.returncode != 0:
                stderr = proc.stderr.decode(errors="replace")
                failed = f"compile: {compiler} failed (exit code {proc.returncode}):\n{stderr}"
                raise CompileError(f"{failed}\nkernel source:\n{_numbered(src)}", src=src, stderr=stderr)
            return out.read_bytes()

    def check_usable(self) -> None:
        """Compile a one-line kernel once per compiler: catches a missing compiler and a broken toolchain alike."""
        _probe(self, find_c_compiler())

    def disassemble(self, lib: bytes) -> None:
        with tempfile.NamedTemporaryFile(suffix=".so") as f:
            f.write(lib)
            f.flush()
            proc = subprocess.run(["objdump", "-d", f.name], capture_output=True, text=True, check=False)
            print(proc.stdout or proc.stderr)


@functools.cache
def _probe(compiler: ClangCompiler, path: str) -> None:
    compiler.compile(_PROBE_SRC)  # path is part of the cache key: a different CPU_CC is probed again
