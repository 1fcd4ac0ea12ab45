"""Fit a linear model by gradient descent on the CPU, with the gradient written out by hand (autograd comes later).

Run `python -m fusegrad.examples.linreg` (or `--help`). The data is synthetic (y = X @ w_true + noise), so nothing is
downloaded; every step is a handful of fused kernels compiled to C. It prints the loss as it falls and the error of
the learned weights against the true ones.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fusegrad import Tensor
from fusegrad.helpers import GlobalCounters


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--samples", type=int, default=4096, help="number of training rows (default 4096)")
    parser.add_argument("--features", type=int, default=32, help="number of input features (default 32)")
    parser.add_argument("--steps", type=int, default=200, help="gradient steps (default 200)")
    parser.add_argument("--lr", type=float, default=0.1, help="learning rate (default 0.1)")
    parser.add_argument("--device", default=None, help="device to train on (default: Device.DEFAULT)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic data (default 0)")
    args = parser.parse_args(argv)
    if args.samples < 1 or args.features < 1 or args.steps < 0:
        parser.error("--samples and --features must be at least 1, --steps at least 0")

    rng = np.random.default_rng(args.seed)
    w_true = rng.standard_normal((args.features, 1)).astype(np.float32)
    x_np = rng.standard_normal((args.samples, args.features)).astype(np.float32)
    y_np = x_np @ w_true + 0.01 * rng.standard_normal((args.samples, 1)).astype(np.float32)
    x, y = Tensor(x_np, device=args.device), Tensor(y_np, device=args.device)
    w = Tensor.zeros(args.features, 1, device=args.device).contiguous().realize()

    start = time.perf_counter()
    for step in range(args.steps + 1):
        residual = x @ w - y  # (n, 1)
        loss = (residual * residual).mean()
        # d(mean(r^2))/dw = 2/n * X^T r
        grad = x.T @ residual * (2.0 / args.samples)
        w.assign(w - grad * args.lr)
        Tensor.realize(loss, w)
        if step % max(1, args.steps // 10) == 0 or step == args.steps:
            print(f"step {step:4d}  loss {loss.item():.6f}")
    took = time.perf_counter() - start
    error = float(np.abs(w.numpy() - w_true).max())
    print(
        f"max |w - w_true| = {error:.4f}; {args.steps} steps in {took:.2f} s, {GlobalCounters.kernel_count} kernels run"
    )


if __name__ == "__main__":
    main()
