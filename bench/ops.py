"""Op speed against the machine's limits, side by side in one process: numpy, torch (CPU, 2 threads), tinygrad (the
reference, DEV=CPU), fusegrad eager, fusegrad (default kernel opts) and fusegrad BEAM=2 (searched opts, disk cache).

Cases (issue #12's table): matmul 1024² and 2048² (2n³ flops) and a tiny transformer's small matmuls; conv2d forward
(batch 8, 64 -> 64 channels, 56x56, 3x3, padding 1) and forward + backward (the output and the gradients of input and
weight of sum(out * g), 3x the forward's flops: with sum(out) alone the gradient of ones folds into window sums);
scaled_dot_product_attention (4, 8, 256, 64), plain and causal (4·B·H·T²·D flops for both); softmax and layernorm
(with weight and bias) over (4096, 1024), forward and forward + backward (the output and the input's gradient of
sum(out * g)); a sum of 16M floats and a fused elementwise chain on 4M; and, beyond the issue's table (no target), a
2048² transpose copy (x.T.contiguous()). Row ops, sum, chain and transpose are rated in GB/s of their least traffic
(each input read once, each output written once).

Timing: tinygrad and fusegrad run under TinyJit, so only their kernels are timed (the "eager" column is fusegrad
without it: schedule, cached-kernel lookup and launch every call); torch and numpy run eagerly. Each case is warmed
up on every peer (TinyJit needs two calls to capture), then the peers take turns, --reps of them
(a peer stops once its runs pass --timeout seconds); a turn is a 50 ms settle (the previous peer's OpenMP
threads spin for milliseconds and would take a core from the next) and runs back to back, as a loop runs them, at
least 3 and for at least 20 ms (the first runs after a pause pay for waking threads and cores; bench/peak.c's loops
run back to back too): best reported. Load from other work falls on all alike. A
case whose first run alone is that slow reports that run (*, compile included) or is marked ! (timed out). The
BEAM=2 column searches each new kernel once, in its first (untimed) run, each search capped at --beam-budget seconds
(printed), and keeps the choice in the disk cache: a second run of this bench pays nothing. Correctness is checked
once per case against torch in float64 (max abs error of each system, fusegrad's BEAM=2 kernels included).

The machine's peak (bench/peak.c, compiled with cc and run on every core before and after the cases, best kept): fp32
FMA GFLOP/s and copy GB/s at the bench's working-set size (64 MiB touched) and past every cache (2 GiB). The targets
are the issue's, read on the default fusegrad column; the softmax and layernorm forward passes alone, which the issue
holds to nothing by themselves, are held to torch and 80% of the copy peak, as sum and chain are. A memory-bound
case's copy peak is peak.c's copy loop over that case's own traffic, timed as one more peer in the case's turns (the
"copy" column): this host's bandwidth swings 2x within minutes, so a peak measured minutes apart is no yardstick
(the before/after figures are printed too, and stand in where the copy did not run). Heuristics vs
BEAM=2 are per case and per kernel (the search's own timing of the heuristic's opts beside its choice). Training
steps: bench/train.py.
Usage: python bench/ops.py [--quick] [--reps N] [--timeout S] [--cases SUBSTRING ...] [--peers NAME ...]
[--beam-budget S]. --quick: the issue's cases without matmul 2048, the small matmuls and the backward passes; no eager
column; 2 reps; 10 s per BEAM search (a few minutes with a cold BEAM cache, about one with a warm one).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

os.environ.setdefault("DEV", "CPU")  # the reference system may pick another backend otherwise

MATMUL_SIZES = (1024, 2048)
SETTLE = 0.05  # seconds slept before each peer's turn: torch's OpenMP threads spin for ms after its run, taking a core
RUNS_PER_TURN = 3  # timed runs of one peer back to back in its turn, at least
TURN_S = 0.02  # and for at least this many seconds: a 1 ms kernel reaches its steady speed only after a few runs
SMALL_MATMULS = {"mm 512x128@128": ((512, 128), (128, 128)),  # a tiny transformer's projection
                 "bmm 64x32@32x64": ((16, 4, 64, 32), (16, 4, 32, 64))}  # and its attention  # fmt: skip
CONV_X, CONV_W = (8, 64, 56, 56), (64, 64, 3, 3)
SDPA_SHAPE = (4, 8, 256, 64)
ROWS = (4096, 1024)
SUM_N, CHAIN_N = 16 << 20, 4 << 20
CONV_FLOPS = 2 * CONV_X[0] * CONV_W[0] * CONV_X[2] * CONV_X[3] * CONV_W[1] * CONV_W[2] * CONV_W[3]
SDPA_FLOPS = 4.0 * math.prod(SDPA_SHAPE[:3]) * SDPA_SHAPE[2] * SDPA_SHAPE[3]  # q @ k.T and p @ v
ROW_BYTES = 4.0 * math.prod(ROWS)


@dataclass(frozen=True, slots=True)
class Case:
    """A case's work (`flops`, or `bytes` of least traffic) and its target: `vs` peer (or "numpy|torch") at `ratio`
    times its speed and, for `of_peak` > 0, that fraction of the measured peak (FMA for flops, copy for bytes)."""

    flops: float = 0.0
    bytes: float = 0.0
    vs: str = ""
    ratio: float = 1.0
    of_peak: float = 0.0
    backward: bool = False


CASES: dict[str, Case] = {
    **{f"matmul {n}": Case(flops=2.0 * n**3, vs="numpy", ratio=0.9, of_peak=0.75) for n in MATMUL_SIZES},
    **{name: Case(flops=2.0 * math.prod(a) * b[-1]) for name, (a, b) in SMALL_MATMULS.items()},
    "conv2d fwd": Case(flops=CONV_FLOPS, vs="torch"),
    "conv2d fwd+bwd": Case(flops=3.0 * CONV_FLOPS, vs="torch", backward=True),
    "sdpa": Case(flops=SDPA_FLOPS, vs="torch"),
    "sdpa causal": Case(flops=SDPA_FLOPS, vs="torch"),
    # the table sets 2x torch on the forward+backward pair (torch runs it as several passes over memory,
    # fusegrad as one); a forward alone is one read and one write in both, so its target is the copy bandwidth's
    # (as for sum and chain): at 2x torch it would have to move 32 MB at about twice the host's measured copy rate
    "softmax fwd": Case(bytes=2 * ROW_BYTES, vs="torch", of_peak=0.8),
    "softmax fwd+bwd": Case(bytes=4 * ROW_BYTES, vs="torch", ratio=2.0, backward=True),
    "layernorm fwd": Case(bytes=2 * ROW_BYTES, vs="torch", of_peak=0.8),
    "layernorm fwd+bwd": Case(bytes=4 * ROW_BYTES, vs="torch", ratio=2.0, backward=True),
    "sum 16M": Case(bytes=4.0 * SUM_N, vs="torch", of_peak=0.8),
    "chain 4M": Case(bytes=3 * 4.0 * CHAIN_N, vs="torch", of_peak=0.8),
    "transpose 2048": Case(bytes=2 * 4.0 * 2048 * 2048),  # x.T.contiguous(): not in the table, no target
}
QUICK_SKIPS = ("matmul 2048", "mm ", "bmm ", "fwd+bwd", "transpose")

Inputs = dict[str, np.ndarray]
Cases = dict[str, Callable[[], Any]]


@dataclass
class Timing:
    seconds: float
    runs: int  # timed runs behind `seconds`; 0 means only the first run (which includes compile)
    timed_out: bool = False


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    st = time.perf_counter()
    out = fn()
    return time.perf_counter() - st, out


def as_numpy(out: Any) -> list[np.ndarray]:
    """The result of one run (a tensor of any of the systems, or a tuple of them) as float64 numpy arrays."""
    items = out if isinstance(out, tuple) else (out,)
    arrays = [x.detach().numpy() if hasattr(x, "detach") else x.numpy() if hasattr(x, "realize") else x for x in items]
    return [np.asarray(x, dtype=np.float64) for x in arrays]


def make_inputs(rng: np.random.Generator) -> Inputs:
    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32)

    inputs = {f"{ab}{n}": normal(n, n) for n in MATMUL_SIZES for ab in "ab"}
    for name, (a, b) in SMALL_MATMULS.items():
        inputs[f"{name} a"], inputs[f"{name} b"] = normal(*a), normal(*b)
    inputs["x"], inputs["w"] = normal(*CONV_X), normal(*CONV_W)
    inputs["conv g"] = normal(CONV_X[0], CONV_W[0], *CONV_X[2:])  # the output's gradient (padding 1: same size)
    inputs["q"], inputs["k"], inputs["v"] = (normal(*SDPA_SHAPE) for _ in range(3))
    inputs["rows"], inputs["g"] = normal(*ROWS), normal(*ROWS)
    inputs["weight"], inputs["bias"] = normal(ROWS[1]), normal(ROWS[1])
    inputs["big"], inputs["c1"], inputs["c2"] = normal(SUM_N), normal(CHAIN_N), normal(CHAIN_N)
    return inputs


# *** the cases, per system ***


def tensor_fns(tensor: Any) -> dict[str, tuple[Callable[..., Any], tuple[str, ...]]]:
    """Each case as a function of its input tensors and the names of those inputs (" grad": one a gradient is taken
    of), for the Tensor API that fusegrad and tinygrad share (`tensor` is the Tensor class)."""

    def backward(fn: Callable[..., Any], *names: str) -> tuple[Callable[..., Any], tuple[str, ...]]:
        def run(x: Any, *rest: Any) -> tuple[Any, ...]:
            x.grad = None  # backward adds to an existing gradient
            out = fn(x, *rest)
            (out * rest[-1]).sum().backward()
            tensor.realize(out, x.grad)
            return out, x.grad

        return run, names

    def conv_fwd_bwd(x: Any, w: Any, g: Any) -> tuple[Any, ...]:
        x.grad = w.grad = None
        out = x.conv2d(w, padding=1)
        (out * g).sum().backward()
        tensor.realize(out, x.grad, w.grad)
        return out, x.grad, w.grad

    def layernorm(x: Any, weight: Any, bias: Any, *_: Any) -> Any:
        return x.layernorm(-1) * weight + bias

    return {
        **{f"matmul {n}": (lambda a, b: (a @ b).realize(), (f"a{n}", f"b{n}")) for n in MATMUL_SIZES},
        **{name: (lambda a, b: (a @ b).realize(), (f"{name} a", f"{name} b")) for name in SMALL_MATMULS},
        "conv2d fwd": (lambda x, w: x.conv2d(w, padding=1).realize(), ("x", "w")),
        "conv2d fwd+bwd": (conv_fwd_bwd, ("x grad", "w grad", "conv g")),
        "sdpa": (lambda q, k, v: q.scaled_dot_product_attention(k, v).realize(), ("q", "k", "v")),
        "sdpa causal": (
            lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True).realize(),
            ("q", "k", "v"),
        ),
        "softmax fwd": (lambda x: x.softmax(-1).realize(), ("rows",)),
        "softmax fwd+bwd": backward(lambda x, g: x.softmax(-1), "rows grad", "g"),
        "layernorm fwd": (lambda x, w, b: layernorm(x, w, b).realize(), ("rows", "weight", "bias")),
        "layernorm fwd+bwd": backward(layernorm, "rows grad", "weight", "bias", "g"),
        "sum 16M": (lambda x: x.sum().realize(), ("big",)),
        "chain 4M": (lambda a, b: (((a + 1.0) * b - 0.5).exp() * 0.25 + a).realize(), ("c1", "c2")),
        "transpose 2048": (lambda a: a.T.contiguous().realize(), ("a2048",)),
    }


def tensor_cases(tensor: Any, jit: Any, inp: Inputs, names: list[str], **grad_kwargs: Any) -> Cases:
    """The cases for a Tensor-API system: each a call of its function on realized inputs, under `jit` if given.
    `grad_kwargs` make the inputs of backward cases: fusegrad asks for `requires_grad=True`; tinygrad 0.14 has no such
    flag (its backward fills every float tensor's `.grad`)."""
    fns = tensor_fns(tensor)
    made: dict[str, Any] = {}

    def arg(name: str) -> Any:
        if name not in made:
            base, grad = name.removesuffix(" grad"), name.endswith(" grad")
            made[name] = tensor(inp[base], **(grad_kwargs if grad else {})).realize()
        return made[name]

    cases: Cases = {}
    for name in names:
        fn, arg_names = fns[name]
        args = [arg(a) for a in arg_names]
        run = jit(fn) if jit is not None else fn
        cases[name] = lambda run=run, args=args: run(*args)
    return cases


def cases_fusegrad(inp: Inputs, names: list[str], jitted: bool = True) -> Cases:
    from fusegrad import Tensor, TinyJit

    return tensor_cases(Tensor, TinyJit if jitted else None, inp, names, requires_grad=True)


def cases_tinygrad(inp: Inputs, names: list[str]) -> Cases:
    import tinygrad

    return tensor_cases(tinygrad.Tensor, tinygrad.TinyJit, inp, names)


def cases_torch(inp: Inputs, names: list[str]) -> Cases:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(2)
    t = {name: torch.from_numpy(arr) for name, arr in inp.items()}
    xg, wg, rg = (t[n].clone().requires_grad_() for n in ("x", "w", "rows"))

    def conv_fwd_bwd() -> tuple[Any, Any, Any]:
        xg.grad = wg.grad = None
        out = F.conv2d(xg, wg, padding=1)
        (out * t["conv g"]).sum().backward()
        return out, xg.grad, wg.grad

    def backward(fn: Callable[[Any], Any]) -> Callable[[], tuple[Any, Any]]:
        def run() -> tuple[Any, Any]:
            rg.grad = None
            out = fn(rg)
            (out * t["g"]).sum().backward()
            return out, rg.grad

        return run

    def layernorm(x: Any) -> Any:
        return F.layer_norm(x, (ROWS[1],), t["weight"], t["bias"])

    cases: Cases = {
        **{f"matmul {n}": (lambda n=n: t[f"a{n}"] @ t[f"b{n}"]) for n in MATMUL_SIZES},
        **{name: (lambda name=name: t[f"{name} a"] @ t[f"{name} b"]) for name in SMALL_MATMULS},
        "conv2d fwd": lambda: F.conv2d(t["x"], t["w"], padding=1),
        "conv2d fwd+bwd": conv_fwd_bwd,
        "sdpa": lambda: F.scaled_dot_product_attention(t["q"], t["k"], t["v"]),
        "sdpa causal": lambda: F.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=True),
        "softmax fwd": lambda: torch.softmax(t["rows"], -1),
        "softmax fwd+bwd": backward(lambda x: torch.softmax(x, -1)),
        "layernorm fwd": lambda: layernorm(t["rows"]),
        "layernorm fwd+bwd": backward(layernorm),
        "sum 16M": lambda: t["big"].sum(),
        "chain 4M": lambda: torch.exp((t["c1"] + 1.0) * t["c2"] - 0.5) * 0.25 + t["c1"],
        "transpose 2048": lambda: t["a2048"].T.contiguous(),
    }
    return {name: cases[name] for name in names}


def cases_numpy(inp: Inputs, names: list[str]) -> Cases:
    """numpy's forward cases (OpenBLAS matmuls; conv as im2col + BLAS; no backward)."""

    def softmax(x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def conv() -> np.ndarray:
        padded = np.pad(inp["x"], ((0, 0), (0, 0), (1, 1), (1, 1)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, CONV_W[2:], axis=(2, 3))  # (N, C, H, W, 3, 3)
        return np.tensordot(windows, inp["w"], axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)

    def sdpa(causal: bool) -> np.ndarray:
        scores = inp["q"] @ inp["k"].swapaxes(-1, -2) / np.float32(math.sqrt(SDPA_SHAPE[3]))
        if causal:
            scores = np.where(np.tril(np.ones(scores.shape[-2:], bool)), scores, np.float32(-np.inf))
        return softmax(scores) @ inp["v"]

    def layernorm() -> np.ndarray:
        x = inp["rows"]
        mean = x.mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + np.float32(1e-5)) * inp["weight"] + inp["bias"]

    cases: Cases = {
        **{f"matmul {n}": (lambda n=n: inp[f"a{n}"] @ inp[f"b{n}"]) for n in MATMUL_SIZES},
        **{name: (lambda name=name: inp[f"{name} a"] @ inp[f"{name} b"]) for name in SMALL_MATMULS},
        "conv2d fwd": conv,
        "sdpa": lambda: sdpa(False),
        "sdpa causal": lambda: sdpa(True),
        "softmax fwd": lambda: softmax(inp["rows"]),
        "layernorm fwd": layernorm,
        "sum 16M": lambda: inp["big"].sum(),
        "chain 4M": lambda: np.exp((inp["c1"] + 1.0) * inp["c2"] - 0.5) * 0.25 + inp["c1"],
        "transpose 2048": lambda: np.ascontiguousarray(inp["a2048"].T),
    }
    return {name: cases[name] for name in names if name in cases}


def reference(inp: Inputs, names: list[str]) -> dict[str, list[np.ndarray]]:
    """Each case's result computed by torch in float64, the yardstick for every system's error."""
    import torch

    cases = cases_torch({name: arr.astype(np.float64) for name, arr in inp.items()}, names)
    ret = {}
    for name, fn in cases.items():
        with torch.set_grad_enabled(CASES[name].backward):
            ret[name] = as_numpy(fn())
    return ret


# *** running the peers ***

Timings = dict[str, dict[str, "Timing | None"]]  # peer -> case -> timing (None: the case failed)
BEAM_PEER, DEFAULT_PEER = "fusegrad BEAM=2", "fusegrad"
COPY_PEER = "copy"  # bench/peak.c's copy loop, timed beside each memory-bound case (cases_copy)


@dataclass
class Run:
    """Everything one bench run measured."""

    timings: Timings
    outputs: dict[str, dict[str, list[np.ndarray]]]
    searches: dict[str, list[Any]]  # case -> search.SearchResult of each kernel BEAM=2 searched or read from the cache


def cases_copy(inp: Inputs, names: list[str]) -> Cases:
    """bench/peak.c's copy loop over each memory-bound case's least traffic (its bytes: half read, half written),
    timed in the case's turns like a peer: the copy rate that case is held to, measured in the same minutes (this
    host's memory bandwidth swings 2x from one minute to the next, and a copy peak taken minutes apart is no
    yardstick) and over a working set of the case's size (a cached share of it counts alike)."""
    copy = load_peak_module().copy_function()
    cases: Cases = {}
    for name in names:
        if CASES[name].bytes and CASES[name].of_peak:
            src = np.ones(int(CASES[name].bytes) // 8, dtype=np.float32)
            cases[name] = functools.partial(copy, np.empty_like(src), src)
    return cases


def peer_makers(quick: bool) -> dict[str, Callable[[Inputs, list[str]], Cases]]:
    makers: dict[str, Callable[[Inputs, list[str]], Cases]] = {
        "numpy": cases_numpy, "torch": cases_torch, "tinygrad": cases_tinygrad}  # fmt: skip
    if not quick:
        makers["fusegrad eager"] = lambda inp, names: cases_fusegrad(inp, names, jitted=False)
    makers[DEFAULT_PEER] = cases_fusegrad
    makers[BEAM_PEER] = cases_fusegrad
    makers[COPY_PEER] = cases_copy
    return makers


def in_context(peer: str, fn: Callable[[], Any]) -> Callable[[], Any]:
    """`fn` run with the peer's BEAM setting (it matters where kernels compile: the warm-up)."""
    from fusegrad.helpers import Context

    def run() -> Any:
        with Context(BEAM=2 if peer == BEAM_PEER else 0):
            return fn()

    return run


def warm_up(peer: str, name: str, fn: Callable[[], Any], args: argparse.Namespace, run: Run) -> Timing | None:
    """Run a case until its kernels are captured (TinyJit: run, capture, replay; BEAM=2 searches in the first run);
    its first result is kept for the correctness check. A Timing here means the case is too slow to repeat."""
    from fusegrad.codegen import search

    search.searches.clear()
    first, out = timed(fn)
    if peer == BEAM_PEER:
        run.searches[name] = list(search.searches)
        first, _ = timed(fn)  # the first run searched: the timing budget starts after it
    run.outputs[peer][name] = as_numpy(out)
    if first > args.timeout:
        return Timing(first, 0, timed_out=True)
    if first * (args.reps + 3) > args.timeout:  # slow: the repeats would pass the budget, so the first run stands
        return Timing(first, 0)
    for _ in range(0 if peer in ("numpy", "torch", "fusegrad eager") else 2):
        fn()
    return None


def turn(fn: Callable[[], Any]) -> list[float]:
    """One peer's turn: runs back to back, at least RUNS_PER_TURN of them and for at least TURN_S seconds."""
    got: list[float] = []
    while len(got) < RUNS_PER_TURN or sum(got) < TURN_S:
        got.append(timed(fn)[0])
    return got


def time_case(name: str, fns: dict[str, Callable[[], Any]], args: argparse.Namespace, run: Run) -> None:
    """Warm every peer's run of the case up, then time them in turns (see `turn`; the best run kept), so that load
    from other work on the shared cores falls on every peer alike."""
    times: dict[str, list[float]] = {}
    for peer, fn in fns.items():
        try:
            done = warm_up(peer, name, fn, args, run)
        except Exception as e:  # one failing case leaves the others standing
            print(f"{peer} {name}: failed ({type(e).__name__}: {str(e)[:200]})")
            run.timings[peer][name] = None
            continue
        if done is not None:
            run.timings[peer][name] = done
        else:
            times[peer] = []
    for _ in range(args.reps):
        for peer, got in times.items():
            if sum(got) + min(got, default=0.0) <= args.timeout:
                time.sleep(SETTLE)  # the previous peer's OpenMP threads stop spinning first (torch's spin for ms)
                # back to back, as a training loop runs: a first run after the pause pays for waking threads and
                # cores (fusegrad's chain 4M: 1.03 ms back to back, 2.08 ms after a 50 ms pause)
                got.extend(turn(fns[peer]))
    for peer, got in times.items():
        run.timings[peer][name] = Timing(min(got), len(got))
    cells = [f"{p} {by_case[name].seconds * 1e3:.2f}" for p, by_case in run.timings.items() if by_case.get(name)]
    searched = sum(r.search_s for r in run.searches.get(name, []) if not r.cached)
    print(f"{name}: " + ", ".join(cells) + f" ms (BEAM=2 searched {searched:.1f} s)", flush=True)


def run_all(inp: Inputs, names: list[str], args: argparse.Namespace) -> Run:
    run = Run({}, {}, {})
    peers: dict[str, Cases] = {}
    for peer, make in peer_makers(args.quick).items():
        if args.peers and peer not in args.peers and not peer.startswith("fusegrad") and peer != COPY_PEER:
            continue
        try:
            peers[peer] = {name: in_context(peer, fn) for name, fn in make(inp, names).items()}
        except Exception as e:  # a peer that is not installed is reported, not fatal
            print(f"{peer}: skipped ({type(e).__name__}: {e})")
            continue
        run.timings[peer], run.outputs[peer] = {}, {}
    for name in names:
        time_case(name, {peer: cases[name] for peer, cases in peers.items() if name in cases}, args, run)
    return run


# *** the report ***


def rate(case: Case, t: Timing | None) -> float | None:
    """GFLOP/s or GB/s."""
    if t is None:
        return None
    return (case.flops or case.bytes) / t.seconds / 1e9


def time_cell(t: Timing | None) -> str:
    if t is None:
        return f"{'-':>12s}"
    mark = "!" if t.timed_out else "*" if t.runs == 0 else " "
    return f"{t.seconds * 1e3:11.2f}{mark}"


def print_times(names: list[str], run: Run) -> None:
    peers = list(run.timings)
    print(f"\ntimes, ms (best of the timed runs; * first run only, compile included; ! timed out)\n{'case':20s}"
          + "".join(f"{p.replace('fusegrad', 'fg'):>12s}" for p in peers))  # fmt: skip
    for name in names:
        print(f"{name:20s}" + "".join(time_cell(run.timings[p].get(name)) for p in peers))


def speedup(run: Run, name: str, peer: str, ours: str = DEFAULT_PEER) -> float | None:
    """How many times faster `ours` is than `peer` on case `name` (None: either is missing)."""
    mine, theirs = run.timings.get(ours, {}).get(name), run.timings.get(peer, {}).get(name)
    return theirs.seconds / mine.seconds if mine and theirs else None


def peak_rate(name: str, run: Run, peak: Any) -> float:
    """The limit case `name` is measured against: the FMA peak (GFLOP/s) for a flop-bound case; for a memory-bound
    one the copy loop's rate over the same traffic in the case's own turns (GB/s; cases_copy), or, where that did not
    run, the measured peak's copy at the bench's working-set size."""
    case = CASES[name]
    if case.flops:
        return float(peak.fma_gflops)
    copied = rate(case, run.timings.get(COPY_PEER, {}).get(name))
    return copied if copied is not None else float(peak.copy_gbs[min(peak.copy_gbs)])


def target(name: str, run: Run, peak: Any) -> tuple[str, str]:
    """(the target in words, met / not met / n/a) for fusegrad's default column."""
    case = CASES[name]
    if not case.vs:
        return "-", ""
    words = [f">={case.ratio:g}x {case.vs}"]
    ratio = speedup(run, name, case.vs)
    checks = [None if ratio is None else ratio >= case.ratio]
    if case.of_peak:
        limit = peak_rate(name, run, peak)
        words.append(f">={case.of_peak:.0%} {'FMA' if case.flops else 'copy'} peak")
        ours = rate(case, run.timings.get(DEFAULT_PEER, {}).get(name))
        checks.append(None if ours is None else ours >= case.of_peak * limit)
    verdict = "n/a" if None in checks else "met" if all(checks) else "not met"
    return ", ".join(words), verdict


def heuristics_vs_beam(run: Run, name: str) -> float | None:
    """The case's kernels' BEAM=2 times over their heuristic times, summed over kernels (None: no search data)."""
    results = [r for r in run.searches.get(name, []) if r.heuristic_s > 0 and r.best_s > 0]
    if not results:
        return None
    return sum(r.best_s for r in results) / sum(r.heuristic_s for r in results)


def print_targets(names: list[str], run: Run, peak: Any) -> None:
    print(
        "\nfusegrad (default opts, TinyJit): its rate, its fraction of the measured peak, its speed-up over each peer,"
        " and the heuristics' speed as a fraction of BEAM=2's (target >= 0.8: its kernels' BEAM times over their"
        " heuristic times, as the search timed them in turns; the whole-case columns above are noisier)"
    )
    header = ("case", 20), ("fusegrad", 16), ("of peak", 9), ("vs torch", 10), ("vs numpy", 10), ("vs tinygrad", 12)
    print("".join(f"{text:{width}s}" if i == 0 else f"{text:>{width}s}" for i, (text, width) in enumerate(header))
          + f"{'heur/BEAM':>10s}   target")  # fmt: skip
    for name in names:
        case = CASES[name]
        ours = rate(case, run.timings.get(DEFAULT_PEER, {}).get(name))
        unit = "GF/s" if case.flops else "GB/s"
        limit = peak_rate(name, run, peak)
        cells = [f"{ours:10.1f} {unit}" if ours else f"{'-':>15s}", f"{ours / limit:8.0%}" if ours else f"{'-':>8s}"]
        for peer, width in (("torch", 10), ("numpy", 10), ("tinygrad", 12)):
            ratio = speedup(run, name, peer)
            cells.append(f"{ratio:{width - 1}.2f}x" if ratio else f"{'-':>{width}s}")
        beam = heuristics_vs_beam(run, name)
        cells.append(f"{beam:9.2f}" if beam is not None else f"{'-':>9s}")
        words, verdict = target(name, run, peak)
        print(f"{name:20s} " + " ".join(cells) + (f"   {words}: {verdict}" if verdict else ""))


def print_kernels(run: Run) -> None:
    """Each kernel BEAM=2 ran: the heuristic's time beside BEAM's, both timed by the search on the same buffers."""
    if not run.searches:
        return
    print(f"\nBEAM=2 per kernel (search timings; heur/BEAM = BEAM time / heuristic time, target >= 0.8; search "
          f"seconds, + when the budget cut it)\n{'case':20s}{'kernel':34s}{'heuristic us':>13s}{'BEAM us':>10s}"
          f"{'heur/BEAM':>10s}{'search s':>10s}   opts where BEAM wins by 20%: heuristic -> BEAM")  # fmt: skip
    # keyed by case too: a name is the kernel's shape, not its body (causal sdpa's masked kernels carry plain sdpa's
    # names), so a name met in an earlier case may be another kernel; within a case a repeated kernel is shown once
    seen: set[tuple[str, str, int]] = set()
    for name, results in run.searches.items():
        for r in results:
            if (name, r.name, r.width) in seen:
                continue
            seen.add((name, r.name, r.width))
            ratio = r.best_s / r.heuristic_s if r.heuristic_s > 0 else math.nan
            searched = f"{r.search_s:9.1f}{'+' if r.capped else ' '}"
            opts = f"   {_opts_text(r.heuristic)} -> {_opts_text(r.opts)}" if ratio < 0.8 else ""
            print(f"{name:20s}{r.name[:33]:34s}{r.heuristic_s * 1e6:13.1f}{r.best_s * 1e6:10.1f}{ratio:10.2f}{searched}"
                  f"{opts}")  # fmt: skip


def _opts_text(opts: tuple[Any, ...]) -> str:
    return " ".join(f"{o.op.name}({o.axis},{o.arg})" for o in opts) or "none"


def print_errors(names: list[str], run: Run, ref: dict[str, list[np.ndarray]]) -> None:
    peers = [p for p in run.outputs if p != COPY_PEER]  # the copy computes no case
    print(
        f"\nmax abs error vs torch float64\n{'case':20s}"
        + "".join(f"{p.replace('fusegrad', 'fg'):>12s}" for p in peers)
    )
    for name in names:
        cells = []
        for peer in peers:
            got = run.outputs[peer].get(name)
            cells.append(f"{max_abs_err(got, ref[name]):12.1e}" if got is not None and name in ref else f"{'-':>12s}")
        print(f"{name:20s}" + "".join(cells))


def max_abs_err(got: list[np.ndarray], ref: list[np.ndarray]) -> float:
    return max(float(np.abs(g.reshape(r.shape) - r).max()) for g, r in zip(got, ref, strict=True))


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def best_peak(first: Any, second: Any) -> Any:
    """Per figure, the better of two measurements (other work on the shared cores only ever lowers one)."""
    copies = {size: max(first.copy_gbs[size], second.copy_gbs[size]) for size in first.copy_gbs}
    return type(first)(max(first.fma_gflops, second.fma_gflops), copies, first.threads)


@functools.cache  # once: cases_copy and main both use it
def load_peak_module() -> ModuleType:
    """bench/peak.py (this file may run as a script or be loaded by path: bench/ is no package)."""
    spec = importlib.util.spec_from_file_location("bench_peak", Path(__file__).with_name("peak.py"))
    if spec is None or spec.loader is None:
        raise FileNotFoundError("bench/ops.py: bench/peak.py is missing")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_peak"] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=10, help="timed turns per case (best is reported)")
    parser.add_argument("--quick", action="store_true", help="skip matmul 2048, small matmuls, backward cases, eager")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds of runs per case and peer")
    parser.add_argument("--cases", nargs="*", default=[], help="run only the cases whose name holds one of these")
    parser.add_argument("--peers", nargs="*", default=[], help="run only these peers (fusegrad's columns always run)")
    parser.add_argument("--beam-budget", type=float, default=None,
                        help="seconds one kernel's BEAM search may take (default 30, 10 with --quick)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.beam_budget is None:
        args.beam_budget = 10.0 if args.quick else 30.0
    if args.reps < 1 or args.timeout <= 0 or args.beam_budget < 0:
        parser.error(f"--reps must be >= 1, --timeout > 0, --beam-budget >= 0: got {args.reps}, {args.timeout}, "
                     f"{args.beam_budget}")  # fmt: skip
    if args.quick:
        args.reps = min(args.reps, 2)
    return args


def case_names(args: argparse.Namespace) -> list[str]:
    names = [n for n in CASES if not (args.quick and any(s in n for s in QUICK_SKIPS))]
    return [n for n in names if not args.cases or any(s in n for s in args.cases)]


def main() -> None:
    args = parse_args()
    names = case_names(args)
    peak_module = load_peak_module()
    from fusegrad.codegen import search

    search.BUDGET_S = args.beam_budget
    start, load_before = time.perf_counter(), load()
    before = peak_module.measure_peak()
    print(peak_module.describe(before), flush=True)
    run = run_all(make_inputs(np.random.default_rng(0)), names, args)
    if DEFAULT_PEER not in run.timings:
        raise SystemExit("fusegrad could not be loaded")
    after = peak_module.measure_peak()
    print(peak_module.describe(after))
    peak = best_peak(before, after)
    print(f"\nload average {load_before} at the start, {load()} at the end; {time.perf_counter() - start:.0f} s; "
          f"{peak_module.describe(peak)} (best of the two)")  # fmt: skip
    print_times(names, run)
    print_targets(names, run, peak)
    print_kernels(run)
    if "torch" in run.timings:  # checked after all timing, so torch's float64 run disturbs no measurement
        print_errors(names, run, reference(make_inputs(np.random.default_rng(0)), names))
    print("\ntraining steps (GPT and convnet, fusegrad vs torch vs tinygrad): python bench/train.py")


if __name__ == "__main__":
    main()
