"""Kernel speed, side by side in one process: fusegrad vs numpy vs torch (CPU, 2 threads) vs tinygrad (reference).

Cases: a fused elementwise chain on 4M floats (numpy must make temporaries), a 16M-float sum, softmax over
(4096, 1024), and cold vs warm time for a small graph (schedule + compile, then a hit in the kernel cache).
Usage: python bench/kernels.py [--reps N]. Missing peers (torch, tinygrad) are reported and skipped.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

os.environ.setdefault("DEV", "CPU")  # the reference system may pick another backend otherwise


def best_of(fn: Callable[[], Any], reps: int) -> float:
    fn()  # warm up: compile, allocate
    times = []
    for _ in range(reps):
        st = time.perf_counter()
        fn()
        times.append(time.perf_counter() - st)
    return min(times)


def chain_numpy(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.exp((a + 1.0) * b - 0.5) * 0.25 + a


def cases_fusegrad(a: np.ndarray, b: np.ndarray, big: np.ndarray, sm: np.ndarray) -> dict[str, Callable[[], Any]]:
    from fusegrad import Tensor

    ta, tb, tbig, tsm = (Tensor(x).realize() for x in (a, b, big, sm))
    return {
        "chain 4M": lambda: (((ta + 1.0) * tb - 0.5).exp() * 0.25 + ta).realize(),
        "sum 16M": lambda: tbig.sum().realize(),
        "softmax 4096x1024": lambda: tsm.softmax(-1).realize(),
    }


def cases_numpy(a: np.ndarray, b: np.ndarray, big: np.ndarray, sm: np.ndarray) -> dict[str, Callable[[], Any]]:
    def softmax() -> np.ndarray:
        e = np.exp(sm - sm.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    return {"chain 4M": lambda: chain_numpy(a, b), "sum 16M": lambda: big.sum(), "softmax 4096x1024": softmax}


def cases_torch(a: np.ndarray, b: np.ndarray, big: np.ndarray, sm: np.ndarray) -> dict[str, Callable[[], Any]]:
    import torch

    torch.set_num_threads(2)
    ta, tb, tbig, tsm = (torch.from_numpy(x) for x in (a, b, big, sm))
    return {
        "chain 4M": lambda: torch.exp((ta + 1.0) * tb - 0.5) * 0.25 + ta,
        "sum 16M": lambda: tbig.sum(),
        "softmax 4096x1024": lambda: torch.softmax(tsm, -1),
    }


def cases_tinygrad(a: np.ndarray, b: np.ndarray, big: np.ndarray, sm: np.ndarray) -> dict[str, Callable[[], Any]]:
    import tinygrad

    ta, tb, tbig, tsm = (tinygrad.Tensor(x).realize() for x in (a, b, big, sm))
    return {
        "chain 4M": lambda: (((ta + 1.0) * tb - 0.5).exp() * 0.25 + ta).realize(),
        "sum 16M": lambda: tbig.sum().realize(),
        "softmax 4096x1024": lambda: tsm.softmax(-1).realize(),
    }


COLD_WARM = """
import time
import numpy
from fusegrad import Tensor, Device
Device.DEFAULT  # open the device first: imports and device start-up are not what is measured
x = Tensor([[1.0, 2.0], [3.0, 4.0]])
(x + 1).realize()  # a different kernel: loads the scheduler, codegen and compiler modules
st = time.perf_counter()
((x * 3.5 + 1.25).exp2().sum(1) - 0.75).realize()
print(0.0, time.perf_counter() - st)
"""


def cold_warm() -> tuple[float, float]:
    """Seconds for the small graph in a fresh process with an empty kernel cache (cold) and with it filled (warm)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, CACHEDB=os.path.join(tmp, "cache.db"))
        runs = []
        for _ in range(2):
            out = subprocess.run([sys.executable, "-c", COLD_WARM], env=env, capture_output=True, text=True, check=True)
            runs.append(float(out.stdout.split()[1]))
    return runs[0], runs[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions per case (best is reported)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(4 << 20, dtype=np.float32), rng.standard_normal(4 << 20, dtype=np.float32)
    big = rng.standard_normal(16 << 20, dtype=np.float32)
    sm = rng.standard_normal((4096, 1024), dtype=np.float32)
    peers: dict[str, Callable[..., dict[str, Callable[[], Any]]]] = {
        "fusegrad": cases_fusegrad, "numpy": cases_numpy, "torch": cases_torch, "tinygrad": cases_tinygrad}  # fmt: skip
    results: dict[str, dict[str, float]] = {}
    for name, make in peers.items():
        try:
            cases = make(a, b, big, sm)
        except Exception as e:  # a peer that is not installed is reported, not fatal
            print(f"{name}: skipped ({type(e).__name__}: {e})")
            continue
        results[name] = {case: best_of(fn, args.reps) for case, fn in cases.items()}
    print(f"\n{'case':22s}" + "".join(f"{n:>12s}" for n in results) + "   fusegrad speed-up vs each peer")
    for case in results["fusegrad"]:
        row = "".join(f"{results[n][case] * 1e3:10.2f}ms" for n in results)
        ratios = ", ".join(
            f"{n} {results[n][case] / results['fusegrad'][case]:.2f}x" for n in results if n != "fusegrad"
        )
        print(f"{case:22s}{row}   {ratios}")
    cold, warm = cold_warm()
    print(f"\nsmall graph in a fresh process: cold {cold * 1e3:.1f} ms (schedule + compile), warm {warm * 1e3:.1f} ms "
          f"(kernel cache hit), {cold / warm:.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
