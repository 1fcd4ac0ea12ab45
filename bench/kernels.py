"""Kernel speed, side by side in one process: fusegrad vs numpy vs torch (CPU, 2 threads) vs tinygrad (reference).

Cases: a fused elementwise chain on 4M floats (numpy must make temporaries), a 16M-float sum, softmax and layernorm
(with weight and bias) over (4096, 1024), forward and forward+backward (the output and the input's gradient), matmul
1024² and 2048², conv2d (8, 64, 56, 56) with 64 3x3 filters, padding 1, and scaled_dot_product_attention of
(4, 8, 256, 64) without and with a causal mask (throughput in GFLOP/s beside the time; fusegrad's matmul and conv
run under TinyJit, so only the kernel is timed; its other cases run eagerly, and again under TinyJit in the
fusegrad-jit column: the difference is the frontend's time), and cold vs warm time for a small graph (schedule +
compile, then a hit in the kernel cache).
Usage: python bench/kernels.py [--reps N] [--cases SUBSTRING ...]. Missing peers (torch, tinygrad) are reported and
skipped. Unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE for numpy's own speed (they slow its BLAS on these machines).
"""

from __future__ import annotations

import argparse
import functools
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


MATMUL_SIZES = (1024, 2048)
CONV_X, CONV_W = (8, 64, 56, 56), (64, 64, 3, 3)
SDPA = (4, 8, 256, 64)  # (batch, heads, length, head size): q @ k.T and p @ v are 2 * B * H * L * L * E FLOPs each
FLOPS = {
    **{f"matmul {n}": 2.0 * n**3 for n in MATMUL_SIZES},
    **dict.fromkeys(("sdpa", "sdpa causal"), 4.0 * SDPA[0] * SDPA[1] * SDPA[2] ** 2 * SDPA[3]),
    "conv2d 3x3": 2.0 * CONV_X[0] * CONV_W[0] * CONV_X[2] * CONV_X[3] * CONV_W[1] * CONV_W[2] * CONV_W[3],
}


def heavy_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    ret = {f"mm{n}": rng.standard_normal((n, n), dtype=np.float32) for n in MATMUL_SIZES}
    ret["conv x"], ret["conv w"] = (
        rng.standard_normal(CONV_X, dtype=np.float32),
        rng.standard_normal(CONV_W, dtype=np.float32),
    )
    return ret


def _sdpa_inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(2)
    return [rng.standard_normal(SDPA, dtype=np.float32) for _ in range(3)]


def _fusegrad_ops(
    a: np.ndarray, b: np.ndarray, big: np.ndarray, sm: np.ndarray
) -> dict[str, tuple[Callable[..., list[Any]], tuple[Any, ...]]]:
    """The cases fusegrad runs eagerly: case -> (the tensors to realize from the inputs, the inputs)."""
    from fusegrad import Tensor

    ta, tb, tbig, tsm = (Tensor(x).realize() for x in (a, b, big, sm))
    weight, bias = Tensor(sm[0]).realize(), Tensor(sm[1]).realize()
    q, k, v = (Tensor(x).realize() for x in _sdpa_inputs())

    def layernorm(x: Tensor) -> Tensor:
        return x.layernorm(-1) * weight + bias

    def forward_backward(op: Callable[[Tensor], Tensor]) -> Callable[[Tensor], list[Tensor]]:
        def run(t: Tensor) -> list[Tensor]:  # the output and the gradient of sum(out * sm)
            x = t.detach().requires_grad_(True)
            out = op(x)
            (out * t).sum().backward()
            return [out, *([x.grad] if x.grad is not None else [])]

        return run

    return {
        "chain 4M": (lambda x, y: [((x + 1.0) * y - 0.5).exp() * 0.25 + x], (ta, tb)),
        "sum 16M": (lambda x: [x.sum()], (tbig,)),
        "softmax 4096x1024": (lambda x: [x.softmax(-1)], (tsm,)),
        "layernorm 4096x1024": (lambda x: [layernorm(x)], (tsm,)),
        "softmax fwd+bwd": (forward_backward(lambda x: x.softmax(-1)), (tsm,)),
        "layernorm fwd+bwd": (forward_backward(layernorm), (tsm,)),
        "sdpa": (lambda x, y, z: [x.scaled_dot_product_attention(y, z)], (q, k, v)),
        "sdpa causal": (lambda x, y, z: [x.scaled_dot_product_attention(y, z, is_causal=True)], (q, k, v)),
    }


def cases_fusegrad(a: np.ndarray, b: np.ndarray, big: np.ndarray, sm: np.ndarray) -> dict[str, Callable[[], Any]]:
    """Row ops, reductions and attention eagerly (kernels plus the frontend's time); matmul and conv under TinyJit."""
    from fusegrad import Tensor, TinyJit

    ret: dict[str, Callable[[], Any]] = {
        case: functools.partial(lambda op, args: Tensor.realize(*op(*args)), op, args)
        for case, (op, args) in _fusegrad_ops(a, b, big, sm).items()
    }
    heavy = {k: Tensor(x).realize() for k, x in heavy_inputs().items()}
    for n in MATMUL_SIZES:
        ret[f"matmul {n}"] = functools.partial(TinyJit(lambda x: (x @ x).realize()), heavy[f"mm{n}"])
    conv = TinyJit(lambda x, w: x.conv2d(w, padding=1).realize())
    ret["conv2d 3x3"] = functools.partial(conv, heavy["conv x"], heavy["conv w"])
    return ret


def cases_fusegrad_jit(a: np.ndarray, b: np.ndarray, big: np.ndarray, sm: np.ndarray) -> dict[str, Callable[[], Any]]:
    """fusegrad's eager cases under TinyJit: the kernels alone, so the gap to the eager column is the frontend's."""
    from fusegrad import Tensor, TinyJit

    def jitted(op: Callable[..., list[Any]], args: tuple[Any, ...]) -> Callable[[], Any]:
        return functools.partial(TinyJit(lambda *xs: Tensor.realize(*op(*xs))), *args)

    return {case: jitted(op, args) for case, (op, args) in _fusegrad_ops(a, b, big, sm).items()}


def cases_numpy(a: np.ndarray, b: np.ndarray, big: np.ndarray, sm: np.ndarray) -> dict[str, Callable[[], Any]]:
    def softmax() -> np.ndarray:
        e = np.exp(sm - sm.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    heavy = heavy_inputs()
    ret: dict[str, Callable[[], Any]] = {"chain 4M": lambda: chain_numpy(a, b), "sum 16M": lambda: big.sum(),
                                         "softmax 4096x1024": softmax}  # fmt: skip
    for n in MATMUL_SIZES:
        ret[f"matmul {n}"] = functools.partial(np.matmul, heavy[f"mm{n}"], heavy[f"mm{n}"])
    return ret


def cases_torch(a: np.ndarray, b: np.ndarray, big: np.ndarray, sm: np.ndarray) -> dict[str, Callable[[], Any]]:
    import torch

    torch.set_num_threads(2)
    ta, tb, tbig, tsm = (torch.from_numpy(x) for x in (a, b, big, sm))
    heavy = {k: torch.from_numpy(x) for k, x in heavy_inputs().items()}
    weight, bias = torch.from_numpy(sm[0]), torch.from_numpy(sm[1])
    layernorm = functools.partial(torch.nn.functional.layer_norm, normalized_shape=(sm.shape[1],), weight=weight,
                                  bias=bias)  # fmt: skip

    def forward_backward(op: Callable[[Any], Any]) -> None:
        x = tsm.detach().requires_grad_(True)
        (op(x) * tsm).sum().backward()

    ret: dict[str, Callable[[], Any]] = {
        "chain 4M": lambda: torch.exp((ta + 1.0) * tb - 0.5) * 0.25 + ta,
        "sum 16M": lambda: tbig.sum(),
        "softmax 4096x1024": lambda: torch.softmax(tsm, -1),
        "layernorm 4096x1024": lambda: layernorm(tsm),
        "softmax fwd+bwd": lambda: forward_backward(lambda x: torch.softmax(x, -1)),
        "layernorm fwd+bwd": lambda: forward_backward(layernorm),
    }
    for n in MATMUL_SIZES:
        ret[f"matmul {n}"] = functools.partial(torch.matmul, heavy[f"mm{n}"], heavy[f"mm{n}"])
    conv = torch.nn.functional.conv2d
    ret["conv2d 3x3"] = functools.partial(conv, heavy["conv x"], heavy["conv w"], padding=1)
    sdpa = functools.partial(torch.nn.functional.scaled_dot_product_attention, *map(torch.from_numpy, _sdpa_inputs()))
    ret["sdpa"] = sdpa
    ret["sdpa causal"] = functools.partial(sdpa, is_causal=True)
    return ret


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


def print_table(results: dict[str, dict[str, float]]) -> None:
    """Times (and GFLOP/s where the case has a FLOP count) per peer, then fusegrad's speed-up over each."""
    print(f"\n{'case':22s}" + "".join(f"{n:>22s}" for n in results) + "   fusegrad speed-up vs each peer")
    for case in results["fusegrad"]:
        cells = []
        for n in results:
            seconds = results[n].get(case)
            rate = f" {FLOPS[case] / seconds / 1e9:6.1f} GF/s" if seconds is not None and case in FLOPS else ""
            cells.append(f"{'-' if seconds is None else f'{seconds * 1e3:.2f}ms'}{rate}".rjust(22))
        ratios = ", ".join(f"{n} {results[n][case] / results['fusegrad'][case]:.2f}x"
                           for n in results if n != "fusegrad" and case in results[n])  # fmt: skip
        print(f"{case:22s}{''.join(cells)}   {ratios}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions per case (best is reported)")
    parser.add_argument("--cases", nargs="*", default=[], help="run only the cases whose name holds one of these")
    parser.add_argument("--peers", nargs="*", default=[], help="run only these peers (fusegrad always runs)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(4 << 20, dtype=np.float32), rng.standard_normal(4 << 20, dtype=np.float32)
    big = rng.standard_normal(16 << 20, dtype=np.float32)
    sm = rng.standard_normal((4096, 1024), dtype=np.float32)
    peers: dict[str, Callable[..., dict[str, Callable[[], Any]]]] = {
        "fusegrad": cases_fusegrad, "fusegrad-jit": cases_fusegrad_jit, "numpy": cases_numpy, "torch": cases_torch,
        "tinygrad": cases_tinygrad}  # fmt: skip
    results: dict[str, dict[str, float]] = {}
    for name, make in peers.items():
        if args.peers and name != "fusegrad" and name not in args.peers:
            continue
        try:
            cases = make(a, b, big, sm)
        except Exception as e:  # a peer that is not installed is reported, not fatal
            print(f"{name}: skipped ({type(e).__name__}: {e})")
            continue
        chosen = {c: fn for c, fn in cases.items() if not args.cases or any(s in c for s in args.cases)}
        results[name] = {case: best_of(fn, args.reps) for case, fn in chosen.items()}
    print_table(results)
    if args.cases:
        return
    cold, warm = cold_warm()
    print(f"\nsmall graph in a fresh process: cold {cold * 1e3:.1f} ms (schedule + compile), warm {warm * 1e3:.1f} ms "
          f"(kernel cache hit), {cold / warm:.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
