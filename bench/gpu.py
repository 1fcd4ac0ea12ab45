"""fusegrad on a GPU against torch on the same GPU: matmul 4096^2 (fp32, fp16), softmax (8192, 8192), a conv2d and a
GPT training step; each the best of several runs after warm-up, synchronised, with the largest difference between the
two results (the GPT step: the first step's loss, CL mode only). Targets (issue 15, H200): fp32 matmul >= 60% of
torch, the others >= 0.8x torch (tensor cores later).

`--cl` runs the same cases, smaller, on the CL device (PoCL without a GPU) against fusegrad's CPU device: it checks
that the GPU path computes the same results, not its speed.
A case that fails prints its error and the rest still run; without torch on CUDA the comparison is skipped with the
reason. Usage: python bench/gpu.py [--cl] [--seconds S] [--device CUDA] [--cases CASE ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusegrad import Tensor, nn
from fusegrad.device import Device
from fusegrad.helpers import Context


@dataclass(frozen=True)
class Sizes:
    matmul: int
    softmax: tuple[int, int]
    conv: tuple[int, int, int, int]  # batch, channels in and out, height = width (3x3 kernel, padding 1)
    gpt: tuple[int, int, int, int, int]  # batch, context, dim, heads, layers (vocab 256)


GPU_SIZES = Sizes(4096, (8192, 8192), (32, 64, 56, 64), (16, 256, 768, 12, 12))
CL_SIZES = Sizes(256, (512, 512), (2, 8, 16, 8), (2, 16, 32, 2, 1))
TARGETS = {"matmul fp32": 0.6, "matmul fp16": 0.8, "softmax": 0.8, "conv2d": 0.8, "gpt step": 0.8}


def best_of(fn: Callable[[], Any], sync: Callable[[], None], seconds: float) -> float:
    """The fastest of as many synchronised runs as fit in `seconds` (at least 3), after two warm-up runs."""
    for _ in range(2):
        fn()
        sync()
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 1000):
        st = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - st)
    return min(times)


def inputs(sizes: Sizes, case: str) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    if case.startswith("matmul"):
        dt = np.float16 if case.endswith("fp16") else np.float32
        return [rng.standard_normal((sizes.matmul,) * 2).astype(dt) for _ in range(2)]
    if case == "softmax":
        return [rng.standard_normal(sizes.softmax).astype(np.float32)]
    batch, cin, hw, cout = sizes.conv
    return [rng.standard_normal((batch, cin, hw, hw)).astype(np.float32),
            rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) * 0.1]  # fmt: skip


def fusegrad_case(case: str, data: list[np.ndarray], device: str) -> Callable[[], Tensor]:
    ts = [Tensor(a, device=device).realize() for a in data]
    if case.startswith("matmul"):
        return lambda: (ts[0] @ ts[1]).realize()
    if case == "softmax":
        return lambda: ts[0].softmax(-1).realize()
    return lambda: ts[0].conv2d(ts[1], padding=1).realize()


def fusegrad_gpt_step(sizes: Sizes, device: str) -> Callable[[], Tensor]:
    from fusegrad.examples.gpt import GPT, GPTConfig, make_step

    batch, context, dim, heads, layers = sizes.gpt
    with Context(DEV=device):
        Tensor.manual_seed(0)  # the same weights on every device: the first steps' losses are compared
        model = GPT(GPTConfig(vocab_size=256, context=context, dim=dim, heads=heads, layers=layers))
        opt = nn.optim.AdamW(nn.state.get_parameters(model), lr=1e-4)
        step = make_step(model, opt, None)
        ids = np.random.default_rng(0).integers(0, 256, (batch, context + 1))
        x, y = Tensor(ids[:, :-1], device=device), Tensor(ids[:, 1:], device=device)
    return lambda: step(x, y)


def torch_case(case: str, data: list[np.ndarray]) -> Callable[[], Any]:
    import torch

    ts = [torch.from_numpy(a).cuda() for a in data]
    if case.startswith("matmul"):
        return lambda: ts[0] @ ts[1]
    if case == "softmax":
        return lambda: ts[0].softmax(-1)
    return lambda: torch.nn.functional.conv2d(ts[0], ts[1], padding=1)


def torch_gpt_step(sizes: Sizes) -> Callable[[], Any]:
    """The same model as fusegrad.examples.gpt in torch: embeddings, pre-norm blocks, causal attention, AdamW."""
    import torch
    import torch.nn.functional as F  # torch's own alias

    batch, context, dim, heads, layers = sizes.gpt

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
            self.qkv, self.out = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
            self.up, self.down = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

        def forward(self, x: Any) -> Any:
            b, t, c = x.shape
            q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
            x = x + self.out(y)
            return x + self.down(F.gelu(self.up(self.norm2(x)), approximate="tanh"))

    embed, pos = torch.nn.Embedding(256, dim).cuda(), torch.nn.Embedding(context, dim).cuda()
    blocks = torch.nn.Sequential(*[Block() for _ in range(layers)]).cuda()
    norm, head = torch.nn.LayerNorm(dim).cuda(), torch.nn.Linear(dim, 256).cuda()
    params = [p for m in (embed, pos, blocks, norm, head) for p in m.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-4)
    ids = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (batch, context + 1))).cuda()
    positions = torch.arange(context).cuda()

    def step() -> Any:
        opt.zero_grad()
        logits = head(norm(blocks(embed(ids[:, :-1]) + pos(positions))))
        loss = F.cross_entropy(logits.reshape(-1, 256), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        return loss

    return step


def max_difference(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)) / (1 + np.abs(b.astype(np.float64)))))


CASES = ["matmul fp32", "matmul fp16", "softmax", "conv2d", "gpt step"]


def measure(case: str, sizes: Sizes, device: str, args: argparse.Namespace) -> dict[str, Any]:
    """One case: fusegrad on `device` against torch on the GPU (or, with --cl, fusegrad's CPU device)."""
    data = [] if case == "gpt step" else inputs(sizes, case)
    ours = fusegrad_gpt_step(sizes, device) if case == "gpt step" else fusegrad_case(case, data, device)
    first = ours().numpy()  # before timing: a training step changes the weights the next one starts from
    if args.cl:
        other_fn = fusegrad_gpt_step(sizes, "CPU") if case == "gpt step" else fusegrad_case(case, data, "CPU")
        diff = max_difference(first, other_fn().numpy())
        other_s = best_of(other_fn, Device["CPU"].synchronize, args.seconds)
    else:
        import torch

        theirs = torch_gpt_step(sizes) if case == "gpt step" else torch_case(case, data)
        diff = float("nan") if case == "gpt step" else max_difference(first, theirs().cpu().numpy())
        other_s = best_of(theirs, torch.cuda.synchronize, args.seconds)
    ours_s = best_of(ours, Device[device].synchronize, args.seconds)
    target = None if args.cl else TARGETS[case]
    return {"case": case, "ours_ms": ours_s * 1e3, "other_ms": other_s * 1e3, "ratio": other_s / ours_s,
            "target": target, "max_rel_diff": diff}  # fmt: skip


def torch_missing() -> str | None:
    """Why torch can't be the comparison on this machine, or None."""
    try:
        import torch
    except ImportError as err:
        return f"torch is not importable: {err}"
    return None if torch.cuda.is_available() else f"torch {torch.__version__} sees no CUDA device"


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every case in `args.cases`, printed as it finishes (a case that fails prints its error; the others still run)."""
    sizes = CL_SIZES if args.cl else GPU_SIZES
    device, other = ("CL", "CPU") if args.cl else (args.device, "torch")
    if not args.cl and (why := torch_missing()) is not None:
        print(f"SKIP: no comparison: {why}", flush=True)
        return []
    print(f"fusegrad {device} vs {other} ({'ratio: ' + other + ' time / fusegrad time' if not args.cl else 'results'})")
    print(f"{'case':12s} {'fusegrad ms':>12s} {other + ' ms':>12s} {'ratio':>7s} {'target':>7s} {'max rel diff':>13s}")
    rows: list[dict[str, Any]] = []
    for case in args.cases:
        try:
            row = measure(case, sizes, device, args)
        except Exception as err:  # one broken case must not hide the others' figures
            print(
                f"{case:12s} FAILED: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}", flush=True
            )
            rows.append({"case": case, "error": f"{type(err).__name__}: {err}"})
            continue
        rows.append(row)
        target = "" if row["target"] is None else f"{row['target']:.2f}"
        print(f"{case:12s} {row['ours_ms']:12.3f} {row['other_ms']:12.3f} {row['ratio']:7.2f} {target:>7s} "
              f"{row['max_rel_diff']:13.2e}", flush=True)  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cl", action="store_true", help="CL (PoCL) against fusegrad's CPU device, smaller sizes")
    parser.add_argument("--device", default="CUDA", help="the GPU device to measure (default CUDA)")
    parser.add_argument("--seconds", type=float, default=1.0, help="time spent on each case (the best run counts)")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=CASES, metavar="CASE", help=f"of {CASES}")
    parser.add_argument("--json", help="also write the rows (one per case: times, ratio, or error) to this file")
    args = parser.parse_args()
    rows = run(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
