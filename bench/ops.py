"""Op speed, side by side in one process: fusegrad vs torch (CPU, 2 threads) vs tinygrad (reference).

Cases: matmul 1024x1024 and 2048x2048 (2*n^3 flops), the small matmuls of a tiny transformer ((512, 128) @ (128, 128)
and a batched (16, 4, 64, 32) @ (16, 4, 32, 64)), conv2d forward (batch 8, 64 -> 64 channels, 56x56, 3x3,
padding 1), conv2d forward + backward (the sum of the output, gradients of input and weight; counted as 3x the
forward's flops: the forward, d/dinput and d/dweight), and scaled_dot_product_attention forward on (4, 8, 256, 64).
Inputs are realized float32 tensors built beforehand; each timed run builds the graph and realizes the result.

Timing: one warm-up run (compile, allocate) is measured; then up to --reps runs, best reported, as long as the runs of
the case stay within --timeout seconds. A case whose warm-up alone is slow enough that repeats would pass that budget
reports the warm-up (marked *, it includes compile time); one whose warm-up passed --timeout is marked ! (timed out; a
run already started cannot be interrupted). Correctness is checked once per case, on the warm-up's result, against
torch in float64: the max abs error of each system is printed beside the times (torch's own float32 error included).
Usage: python bench/ops.py [--reps N] [--quick] [--timeout S]. Missing peers (torch, tinygrad) are reported and
skipped; --quick leaves out matmul 2048 and the conv backward.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

os.environ.setdefault("DEV", "CPU")  # the reference system may pick another backend otherwise

MATMUL_SIZES = (1024, 2048)
SMALL_MATMULS = {"mm 512x128@128": ((512, 128), (128, 128)),  # a tiny transformer's projection
                 "bmm 64x32@32x64": ((16, 4, 64, 32), (16, 4, 32, 64))}  # and its attention  # fmt: skip
CONV_X, CONV_W = (8, 64, 56, 56), (64, 64, 3, 3)
SDPA_SHAPE = (4, 8, 256, 64)
CONV_FLOPS = 2 * CONV_X[0] * CONV_W[0] * CONV_X[2] * CONV_X[3] * CONV_W[1] * CONV_W[2] * CONV_W[3]
FLOPS: dict[str, float | None] = {
    **{f"matmul {n}x{n}": 2.0 * n**3 for n in MATMUL_SIZES},
    **{name: 2.0 * float(np.prod(a)) * b[-1] for name, (a, b) in SMALL_MATMULS.items()},
    "conv2d fwd": CONV_FLOPS,
    "conv2d fwd+bwd": 3.0 * CONV_FLOPS,
    "sdpa fwd": None,  # reported in ms only
}

Inputs = dict[str, np.ndarray]
Cases = dict[str, Callable[[], Any]]
Timings = dict[str, dict[str, "Timing | None"]]  # peer -> case -> timing (None: the case failed)


@dataclass
class Timing:
    seconds: float
    runs: int  # timed runs behind `seconds`; 0 means only the warm-up (which includes compile)
    timed_out: bool = False


def measure(fn: Callable[[], Any], reps: int, timeout: float) -> tuple[Timing, Any]:
    """Best of up to `reps` runs after a measured warm-up, within `timeout` seconds; also the warm-up's result."""
    st = time.perf_counter()
    out = fn()
    first = time.perf_counter() - st
    if first > timeout:
        return Timing(first, 0, timed_out=True), out
    if first * reps > timeout:  # slow: the repeats would pass the budget, so the warm-up stands for the case
        return Timing(first, 0), out
    times: list[float] = []
    while len(times) < reps and sum(times) + (min(times) if times else first) <= timeout:
        st = time.perf_counter()
        fn()
        times.append(time.perf_counter() - st)
    return Timing(min(times), len(times)), out


def as_numpy(out: Any) -> list[np.ndarray]:
    """The result of one run (a tensor of any of the systems, or a tuple of them) as float64 numpy arrays."""
    items = out if isinstance(out, tuple) else (out,)
    return [np.asarray(x.detach().numpy() if hasattr(x, "detach") else x.numpy(), dtype=np.float64) for x in items]


def make_inputs(rng: np.random.Generator) -> Inputs:
    inputs = {}
    for n in MATMUL_SIZES:
        inputs[f"a{n}"], inputs[f"b{n}"] = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    for name, shapes in SMALL_MATMULS.items():
        inputs[f"{name} a"], inputs[f"{name} b"] = (rng.standard_normal(shape, dtype=np.float32) for shape in shapes)
    inputs["x"], inputs["w"] = (rng.standard_normal(shape, dtype=np.float32) for shape in (CONV_X, CONV_W))
    inputs["q"], inputs["k"], inputs["v"] = (rng.standard_normal(SDPA_SHAPE, dtype=np.float32) for _ in range(3))
    return inputs


def cases_tensor(tensor: Any, inp: Inputs, names: list[str], **grad_kwargs: Any) -> Cases:
    """The cases for fusegrad and tinygrad, which share the Tensor API (`tensor` is the Tensor class).

    `grad_kwargs` mark the conv backward's inputs: fusegrad asks for `requires_grad=True`, while tinygrad 0.14
    has no such flag (its backward fills `.grad` of every float tensor in the graph).
    """
    mm = {n: (tensor(inp[f"a{n}"]).realize(), tensor(inp[f"b{n}"]).realize()) for n in MATMUL_SIZES}
    small = {name: (tensor(inp[f"{name} a"]).realize(), tensor(inp[f"{name} b"]).realize()) for name in SMALL_MATMULS}
    x, w = tensor(inp["x"]).realize(), tensor(inp["w"]).realize()
    xg, wg = (tensor(inp[name], **grad_kwargs).realize() for name in "xw")
    q, k, v = (tensor(inp[name]).realize() for name in "qkv")

    def conv_fwd_bwd() -> tuple[Any, Any]:
        xg.grad = wg.grad = None  # backward adds to existing grads
        xg.conv2d(wg, padding=1).sum().backward()
        tensor.realize(xg.grad, wg.grad)
        return xg.grad, wg.grad

    cases: Cases = {
        **{f"matmul {n}x{n}": (lambda a=a, b=b: (a @ b).realize()) for n, (a, b) in mm.items()},
        **{name: (lambda a=a, b=b: (a @ b).realize()) for name, (a, b) in small.items()},
        "conv2d fwd": lambda: x.conv2d(w, padding=1).realize(),
        "conv2d fwd+bwd": conv_fwd_bwd,
        "sdpa fwd": lambda: q.scaled_dot_product_attention(k, v).realize(),
    }
    return {name: cases[name] for name in names}


def cases_fusegrad(inp: Inputs, names: list[str]) -> Cases:
    from fusegrad import Tensor

    return cases_tensor(Tensor, inp, names, requires_grad=True)


def cases_tinygrad(inp: Inputs, names: list[str]) -> Cases:
    import tinygrad

    return cases_tensor(tinygrad.Tensor, inp, names)


def cases_torch(inp: Inputs, names: list[str]) -> Cases:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(2)
    t = {name: torch.from_numpy(arr) for name, arr in inp.items()}
    xg, wg = t["x"].clone().requires_grad_(), t["w"].clone().requires_grad_()

    def conv_fwd_bwd() -> tuple[Any, Any]:
        xg.grad = wg.grad = None
        F.conv2d(xg, wg, padding=1).sum().backward()
        return xg.grad, wg.grad

    cases: Cases = {
        **{f"matmul {n}x{n}": (lambda n=n: t[f"a{n}"] @ t[f"b{n}"]) for n in MATMUL_SIZES},
        **{name: (lambda name=name: t[f"{name} a"] @ t[f"{name} b"]) for name in SMALL_MATMULS},
        "conv2d fwd": lambda: F.conv2d(t["x"], t["w"], padding=1),
        "conv2d fwd+bwd": conv_fwd_bwd,
        "sdpa fwd": lambda: F.scaled_dot_product_attention(t["q"], t["k"], t["v"]),
    }
    return {name: cases[name] for name in names}


def reference(inp: Inputs, names: list[str]) -> dict[str, list[np.ndarray]]:
    """Each case's result computed by torch in float64, the yardstick for every system's error."""
    import torch

    torch.set_num_threads(2)
    cases = cases_torch({name: arr.astype(np.float64) for name, arr in inp.items()}, names)
    with torch.no_grad():
        fwd = {name: as_numpy(fn()) for name, fn in cases.items() if name != "conv2d fwd+bwd"}
    if "conv2d fwd+bwd" in cases:
        fwd["conv2d fwd+bwd"] = as_numpy(cases["conv2d fwd+bwd"]())
    return fwd


def max_abs_err(got: list[np.ndarray], ref: list[np.ndarray]) -> float:
    return max(float(np.abs(g - r).max()) for g, r in zip(got, ref, strict=True))


def cell(t: Timing | None, flops: float | None) -> str:
    if t is None:
        return f"{'failed':>22s}"
    mark = "!" if t.timed_out else "*" if t.runs == 0 else " "
    rate = f"{flops / t.seconds / 1e9:8.1f}GF/s" if flops else " " * 12
    return f"{t.seconds * 1e3:9.1f}ms{mark}{rate}"


def print_table(names: list[str], timings: Timings, errs: dict[str, dict[str, str]]) -> None:
    peers = list(timings)
    others = [p for p in peers if p != "fusegrad"]
    speedup = "fusegrad speed-up vs " + ", ".join(others)
    print(f"\n{'case':16s}" + "".join(f"{p:>22s}" for p in peers) + f"   {speedup}   max abs err vs torch fp64 ("
          + ", ".join(peers) + ")")  # fmt: skip
    for name in names:
        row = "".join(cell(timings[p][name], FLOPS[name]) for p in peers)
        ours = timings["fusegrad"][name]
        ratios = []
        for p in others:
            theirs = timings[p][name]
            ratios.append(f"{theirs.seconds / ours.seconds:.3g}x" if ours and theirs else "-")
        err = ", ".join(errs[p].get(name, "n/a") for p in peers)
        print(f"{name:16s}{row}   {', '.join(ratios):>{len(speedup)}s}   {err}")
    print("\n* one run including compile: repeats skipped because they would pass --timeout; ! timed out")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions per case (best is reported)")
    parser.add_argument("--quick", action="store_true", help="skip matmul 2048x2048 and the conv backward")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds of runs per case before repeats stop")
    args = parser.parse_args()
    names = [n for n in FLOPS if not (args.quick and n in ("matmul 2048x2048", "conv2d fwd+bwd"))]
    inp = make_inputs(np.random.default_rng(0))
    peers: dict[str, Callable[[Inputs, list[str]], Cases]] = {
        "fusegrad": cases_fusegrad, "torch": cases_torch, "tinygrad": cases_tinygrad}  # fmt: skip
    timings: Timings = {}
    outputs: dict[str, dict[str, list[np.ndarray]]] = {}
    for peer, make in peers.items():
        try:
            cases = make(inp, names)
        except Exception as e:  # a peer that is not installed is reported, not fatal
            print(f"{peer}: skipped ({type(e).__name__}: {e})")
            continue
        timings[peer], outputs[peer] = {}, {}
        for name, fn in cases.items():
            try:
                timing, out = measure(fn, args.reps, args.timeout)
            except Exception as e:  # one failing case leaves the others standing
                print(f"{peer} {name}: failed ({type(e).__name__}: {e})")
                timings[peer][name] = None
                continue
            timings[peer][name], outputs[peer][name] = timing, as_numpy(out)
            print(f"{peer:10s}{name:18s}{timing.seconds * 1e3:10.1f} ms", flush=True)
    if "fusegrad" not in timings:
        raise SystemExit("fusegrad could not be loaded")
    errs: dict[str, dict[str, str]] = {p: {} for p in timings}
    if "torch" in timings:  # checked after all timing, so torch's float64 run disturbs no measurement
        ref = reference(inp, names)
        for peer, outs in outputs.items():
            errs[peer] = {name: f"{max_abs_err(got, ref[name]):.1e}" for name, got in outs.items()}
    print_table(names, timings, errs)


if __name__ == "__main__":
    main()
