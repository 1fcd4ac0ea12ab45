"""Kernel duels on a training step: the heuristic's opts against others, on one kernel of the GPT or convnet step.

The step is bench/train.py's (GPT of fusegrad.examples.gpt: vocab 98, context 64, dim 128, 4 heads, 2 layers, batch
16; the MNIST convnet at width 16, batch 64), scheduled once: its loss and the parameters' gradients. Kernels are
named as the jitted step names them. Without a kernel: every kernel's name and heuristic opts. With one: the
heuristic's opts and each given opt list, timed in turns on fresh random buffers (`codegen.search.Bench.duel`, the
comparison BEAM=2 makes before it keeps a choice), best of each turn's runs in microseconds. The heuristic is worked
out on `codegen.simplify_indexing(ast)`, the kernel full_rewrite applies opts to. Nothing is asserted.

    python tools/duel.py gpt                                         # the kernels and their opts
    python tools/duel.py gpt r_3_4_32_16_64 "UPCAST(2,16)" "UPCAST(2,32) UNROLL(3,4)"
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's fusegrad, run from anywhere

from fusegrad import Device, Tensor
from fusegrad.codegen import simplify_indexing
from fusegrad.codegen.opt import Opt, OptOps, choose_opts
from fusegrad.engine.realize import get_program
from fusegrad.nn.state import get_parameters
from fusegrad.uop import Ops

if TYPE_CHECKING:
    from fusegrad.uop.ops import UOp

_OPT = re.compile(r"([A-Z]+)\((\d+),\s*(\d+)\)")


def parse_opts(text: str) -> tuple[Opt, ...]:
    """Opts written as `UPCAST(2,16) UNROLL(3,4)` (an empty string: none)."""
    found = _OPT.findall(text)
    if _OPT.sub("", text).strip():
        raise ValueError(f"duel: opts are written as OP(axis,amount) separated by spaces, got {text!r}")
    try:
        return tuple(Opt(OptOps[op], int(axis), int(amount)) for op, axis, amount in found)
    except KeyError as e:
        raise ValueError(f"duel: no opt {e.args[0]!r}; the opts are {', '.join(o.name for o in OptOps)}") from e


def step_kernels(model: str, batch: int | None = None, width: int = 16) -> dict[str, UOp]:
    """The kernels of one training step of `model` ("gpt" or "convnet"), by name, in schedule order."""
    from fusegrad.nn.optim import Adam

    Tensor.manual_seed(0)
    with Tensor.train():
        if model == "gpt":
            from fusegrad.examples.gpt import GPT, GPTConfig

            net: Any = GPT(GPTConfig(98, 64, 128, 4, 2))
            Adam(get_parameters(net))  # the parameters take gradients
            n = batch or 16
            x, y = Tensor.randint(n, 64, low=0, high=98).realize(), Tensor.randint(n, 64, low=0, high=98).realize()
            loss = net.loss(x, y)
        elif model == "convnet":
            from fusegrad.examples.mnist import ConvNet

            net = ConvNet(width)
            Adam(get_parameters(net))
            n = batch or 64
            images, labels = Tensor.empty(n, 1, 28, 28, dtype="uint8"), Tensor.empty(n, dtype="int32")
            loss = net(images.float() / 255.0).sparse_categorical_crossentropy(labels)
        else:
            raise ValueError(f"duel: the models are gpt and convnet, got {model!r}")
        Tensor.realize(*get_parameters(net))
        loss.backward()
        items = loss.schedule(*[p.grad for p in get_parameters(net) if p.grad is not None])
    kernels: dict[str, UOp] = {}
    for item in items:
        if item.ast.op is Ops.SINK:
            kernels.setdefault(get_program(item.ast, Device["CPU"].renderer).name, item.ast)
    return kernels


def heuristic(ast: UOp) -> tuple[Opt, ...]:
    """The CPU's opts for kernel `ast`, as full_rewrite chooses them."""
    return choose_opts(simplify_indexing(ast), None, Device["CPU"].renderer)


def shown(opts: tuple[Opt, ...]) -> str:
    return " ".join(f"{o.op.name}({o.axis},{o.arg})" for o in opts) or "()"


def duel(
    ast: UOp, ours: tuple[Opt, ...], candidates: list[tuple[Opt, ...]], turns: int
) -> list[tuple[tuple[Opt, ...], list[float] | None]]:
    """Each candidate against the heuristic's opts `ours`: [(opts, [heuristic us, candidate us] per turn, or None if it
    failed)]."""
    from fusegrad.codegen.search import Bench

    bench = Bench.of(ast, "CPU", ours)
    runners = bench.compile(candidates)
    ret: list[tuple[tuple[Opt, ...], list[float] | None]] = []
    for opts in candidates:
        first = bench.run(opts, runners[opts])
        bench.timed[opts] = first[0] if first else None
        if first is None:
            ret.append((opts, None))
            continue
        times: list[float] = []
        for _ in range(turns):
            times.extend(t * 1e6 for t in bench.duel(ours, opts))
        ret.append((opts, times))
    return ret


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", choices=["gpt", "convnet"], help="whose training step")
    parser.add_argument("kernel", nargs="?", help="a kernel's name (without: list them)")
    parser.add_argument("opts", nargs="*", help='opt lists to duel, e.g. "UPCAST(2,16) UNROLL(3,4)"')
    parser.add_argument("--turns", type=int, default=3, help="duels per candidate (default 3)")
    parser.add_argument("--batch", type=int, default=None, help="the step's batch (default: bench/train.py's)")
    args = parser.parse_args(argv)
    if args.turns < 1:
        parser.error("--turns must be at least 1")
    try:
        candidates = [parse_opts(text) for text in args.opts]
        kernels = step_kernels(args.model, args.batch)
    except ValueError as e:
        parser.error(str(e))
    if args.kernel is None:
        for name, ast in kernels.items():
            print(f"{name:36s} {shown(heuristic(ast))}")
        return 0
    if args.kernel not in kernels:
        parser.error(f"no kernel {args.kernel!r} in the {args.model} step; run without a kernel to list them")
    ast = kernels[args.kernel]
    ours = heuristic(ast)
    print(f"{args.kernel}: heuristic {shown(ours)}")
    for opts, times in duel(ast, ours, candidates, args.turns):
        if times is None:
            print(f"  {shown(opts)}: failed (does not apply, or gave other outputs)")
        else:
            pairs = ", ".join(f"{a:.1f} vs {b:.1f}" for a, b in zip(times[::2], times[1::2], strict=True))
            print(f"  {shown(opts)}: heuristic vs this, us per turn: {pairs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
