"""The machine's own limits for bench/ops.py: compiles bench/peak.c with the system C compiler (-march=native, OpenMP)
and runs its fp32 FMA loop and its copy loop on every core. `measure_peak()` returns both; `python bench/peak.py`
prints them. `copy_function()` gives the copy loop as a function that bench/ops.py times beside each memory-bound
case."""

from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SOURCE = Path(__file__).with_name("peak.c")
# copy sizes (bytes per buffer; twice that is touched): one like the bench kernels' working sets (sum 16M reads 64 MiB,
# the 4M chain touches 48 MiB), one far past any cache (this host reports a 480 MiB L3)
COPY_CACHED, COPY_DRAM = 32 << 20, 1 << 30
COPY_TOUCHED_S = 2.0  # copy repetitions per size: about this many seconds' worth of bytes at 10 GB/s, best reported


@dataclass(frozen=True, slots=True)
class Peak:
    """Measured on every core: fp32 GFLOP/s of independent FMAs; copy GB/s (bytes read + written) per buffer size."""

    fma_gflops: float
    copy_gbs: dict[int, float]
    threads: int


FLAGS = ("-O3", "-march=native", "-ffp-contract=fast", "-fopenmp")


def _compile(out: Path, *extra: str) -> None:
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, *FLAGS, *extra, str(SOURCE), "-o", str(out)], check=True, capture_output=True, timeout=120)


def copy_function() -> Callable[[np.ndarray, np.ndarray], None]:
    """peak.c's copy loop as `copy(dst, src)` on two float32 arrays of one size (C-contiguous), on every core (OpenMP,
    as many threads as the process's OMP_NUM_THREADS allows): peak.c built as a shared library and loaded."""
    with tempfile.TemporaryDirectory() as tmp:
        library = Path(tmp) / "libpeak.so"
        _compile(library, "-shared", "-fPIC")
        loaded = ctypes.CDLL(str(library))  # mapped now: the file may go
    copy_floats = loaded.copy_floats
    copy_floats.argtypes, copy_floats.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long], None

    def copy(dst: np.ndarray, src: np.ndarray) -> None:
        if dst.dtype != np.float32 or src.dtype != np.float32 or dst.shape != src.shape:
            raise ValueError(
                f"copy: two float32 arrays of one shape, got {dst.dtype}{dst.shape}, {src.dtype}{src.shape}"
            )
        if not (dst.flags.c_contiguous and src.flags.c_contiguous and dst.flags.writeable):
            raise ValueError("copy: the arrays must be C-contiguous and the destination writeable")
        copy_floats(dst.ctypes.data, src.ctypes.data, dst.size)

    copy.library = loaded  # type: ignore[attr-defined]  # kept with the function: unloading it would unmap the code
    return copy


def _run(binary: Path, threads: int, *args: str) -> list[str]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    out = subprocess.run([str(binary), *args], capture_output=True, text=True, check=True, timeout=300, env=env)
    return out.stdout.split()


def measure_peak(threads: int | None = None, sizes: tuple[int, ...] = (COPY_CACHED, COPY_DRAM)) -> Peak:
    """Compile and run bench/peak.c (cc, or $CC) on `threads` OpenMP threads (default: every core), the copy loop
    on buffers of each of `sizes` bytes."""
    threads = threads or os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "peak"
        _compile(binary)
        fma = float(_run(binary, threads, "fma")[1])
        copy = {}
        for size in sizes:
            reps = max(4, min(100, int(COPY_TOUCHED_S * 10e9 / (2 * size))))
            copy[size] = float(_run(binary, threads, "copy", str(size), str(reps))[2])
    return Peak(fma, copy, threads)


def describe(peak: Peak) -> str:
    copies = ", ".join(f"{2 * size / 2**20:.0f} MiB touched {gbs:.1f} GB/s" for size, gbs in peak.copy_gbs.items())
    return f"measured peak on {peak.threads} threads: fp32 FMA {peak.fma_gflops:.1f} GFLOP/s; copy {copies}"


if __name__ == "__main__":
    print(describe(measure_peak()))
