"""Convolution and row-op speed, fusegrad vs torch (CPU, 2 threads), best of --reps, with the load average.

conv2d (8, 64, 56, 56) x (64, 64, 3, 3), padding 1: forward, and forward + backward under a random output gradient
(a training step's: bench/ops.py's `.sum().backward()` makes the weight gradient a plain window sum), counted as 3x the
forward's flops. Row ops on (4096, 1024): softmax and layernorm forward + backward under a random output gradient,
in GB/s of the memory a one-pass kernel must touch (forward: read x, write y; backward: read x and dy, write dx).
Each fusegrad run builds the graph and realizes it (kernels compiled in the warm-up; the schedule cache hits after).
Usage: python bench/conv.py [--reps N] [--only conv|rows]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

os.environ.setdefault("DEV", "CPU")

CONV_X, CONV_W = (8, 64, 56, 56), (64, 64, 3, 3)
CONV_FLOPS = 2.0 * CONV_X[0] * CONV_W[0] * CONV_X[2] * CONV_X[3] * CONV_W[1] * CONV_W[2] * CONV_W[3]
ROWS = (4096, 1024)
ROW_BYTES = {"fwd": 2 * 4 * ROWS[0] * ROWS[1], "fwd+bwd": 5 * 4 * ROWS[0] * ROWS[1]}


def best_of(fn: Callable[[], Any], reps: int) -> float:
    fn()  # warm-up: compile, allocate
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def fusegrad_cases(inp: dict[str, np.ndarray]) -> dict[str, Callable[[], Any]]:
    from fusegrad import Tensor

    x, w, g = (Tensor(inp[n]).realize() for n in ("x", "w", "g"))
    xg, wg = Tensor(inp["x"], requires_grad=True).realize(), Tensor(inp["w"], requires_grad=True).realize()
    r, dr = Tensor(inp["r"], requires_grad=True).realize(), Tensor(inp["dr"]).realize()

    def conv_step() -> None:
        xg.grad = wg.grad = None
        out = xg.conv2d(wg, padding=1)
        (out * g).sum().backward()
        Tensor.realize(out, xg.grad, wg.grad)  # type: ignore[arg-type]

    def row_step(fn: Callable[[Tensor], Tensor]) -> Callable[[], None]:
        def step() -> None:
            r.grad = None
            out = fn(r)
            (out * dr).sum().backward()
            Tensor.realize(out, r.grad)  # type: ignore[arg-type]

        return step

    return {
        "conv2d fwd": lambda: x.conv2d(w, padding=1).realize(),
        "conv2d fwd+bwd": conv_step,
        "softmax fwd": lambda: r.softmax(-1).realize(),
        "softmax fwd+bwd": row_step(lambda t: t.softmax(-1)),
        "layernorm fwd": lambda: r.layernorm().realize(),
        "layernorm fwd+bwd": row_step(lambda t: t.layernorm()),
    }


def torch_cases(inp: dict[str, np.ndarray]) -> dict[str, Callable[[], Any]]:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(2)
    x, w, g, dr = (torch.tensor(inp[n]) for n in ("x", "w", "g", "dr"))
    xg, wg, r = (torch.tensor(inp[n], requires_grad=True) for n in ("x", "w", "r"))

    def step(fn: Callable[[], Any], leaves: tuple[Any, ...], grad: Any) -> Callable[[], None]:
        def run() -> None:
            for t in leaves:
                t.grad = None
            (fn() * grad).sum().backward()

        return run

    def no_grad(fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            with torch.no_grad():
                return fn()

        return run

    return {
        "conv2d fwd": no_grad(lambda: F.conv2d(x, w, padding=1)),
        "conv2d fwd+bwd": step(lambda: F.conv2d(xg, wg, padding=1), (xg, wg), g),
        "softmax fwd": no_grad(lambda: r.softmax(-1)),
        "softmax fwd+bwd": step(lambda: r.softmax(-1), (r,), dr),
        "layernorm fwd": no_grad(lambda: F.layer_norm(r, (ROWS[1],))),
        "layernorm fwd+bwd": step(lambda: F.layer_norm(r, (ROWS[1],)), (r,), dr),
    }


def rate(name: str, seconds: float) -> str:
    if name.startswith("conv"):
        return f"{CONV_FLOPS * (3 if 'bwd' in name else 1) / seconds / 1e9:6.1f} GFLOP/s"
    return f"{ROW_BYTES[name.split()[1]] / seconds / 1e9:6.1f} GB/s   "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--only", choices=["conv", "rows"])
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    inp = {n: rng.standard_normal(s, dtype=np.float32) for n, s in (("x", CONV_X), ("w", CONV_W), ("r", ROWS))}
    inp["g"] = rng.standard_normal((CONV_X[0], CONV_W[0], *CONV_X[2:]), dtype=np.float32)
    inp["dr"] = rng.standard_normal(ROWS, dtype=np.float32)
    ours, theirs = fusegrad_cases(inp), torch_cases(inp)
    names = [n for n in ours if args.only is None or n.startswith("conv") == (args.only == "conv")]
    print(f"best of {args.reps}; load average {os.getloadavg()[0]:.1f}")
    print(f"| case | fusegrad ms | rate | torch ms | rate | fusegrad / torch |\n|{'---|' * 6}")
    for name in names:
        a, b = best_of(ours[name], args.reps), best_of(theirs[name], args.reps)
        print(f"| {name} | {a * 1e3:.1f} | {rate(name, a)} | {b * 1e3:.1f} | {rate(name, b)} | {b / a:.2f}x |",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
