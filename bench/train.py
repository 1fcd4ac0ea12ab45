"""Training throughput side by side in one process: fusegrad (TinyJit), torch (CPU, 2 threads), tinygrad (reference).

Cases: the small character-level transformer of `fusegrad.examples.gpt` (GPTConfig defaults: vocab 98, context 64,
dim 128, 4 heads, 2 layers; batch 16; AdamW lr 3e-3, weight decay 0.01), and the convnet of `fusegrad.examples.mnist`
(conv/batchnorm/relu/maxpool twice, a linear head; batch 64 of 1x28x28 uint8 images; Adam lr 3e-3), or, where that
module is missing, the same net defined here (the output says which). torch and tinygrad train the same architecture
written with their own layers (torch: a ModuleDict with the same parameter names; tinygrad: its nn classes and its
TinyJit), starting from fusegrad's initial weights, on the same batches: random token ids and random images with random
labels, made beforehand (nothing is downloaded; throughput does not depend on the values). Each fusegrad step realizes
the loss with the gradients, then runs the optimizer (see `gradients`); tinygrad's realizes the loss with its update,
its usual form. Every peer reports the loss of the weights before the update, as torch does, and updates the
batchnorms' running statistics.

Timing: each step is timed on its own, from the call with ready input tensors to the loss as a Python float. The first
--warmup steps (default 2: fusegrad's eager first call and the TinyJit capture call) are not counted; the median
of the next --steps steps (default 15) gives tokens/s (batch*context per step) or images/s; the best is shown too.
The peers take turns over the timed steps (--turns, default 5: three steps each), after a 50 ms pause each, so that
a slow minute of the shared host falls on all of them alike.
The first-call and capture-call times of the jitted peers are their scheduling and compiling (the persistent compile
caches stay on unless --cold sets CACHELEVEL=0). The ratio column is fusegrad's throughput over the peer's.

Loss agreement: every peer's loss at each of the first --check steps is printed next to torch's, with the largest
relative difference; above 1e-3 (or NaN) it says MISMATCH and the exit status is 1 (a bench comparing different
computations).

Timed steps run as a user runs them (fusegrad's jitted replays through its graph runners: one generated C call per
batch of kernels on CPU). Per-step Python overhead of a jitted fusegrad step, measured on extra steps after the
timed ones (the same batches again, replayed without graph runners so that each kernel's C call shows): the ctypes
function of every captured kernel is wrapped so that the time inside each call is summed, and the overhead is the
replay call's wall time minus that sum, within the same replay (so the kernels' varying times cancel out), less what
the wrapper itself adds outside its window (measured at start on libc's abs(), about 0.3 us per call; what lands inside
the window, and ctypes' own argument conversion, count as kernel time). The smallest over those steps is shown, per
step and per kernel; a busy machine inflates it (another process may take the core between kernels). --null adds a
cross-check: the same step jitted on the NULL device, whose kernels run nothing, so that a replay's whole time is
overhead (less than on CPU by the CPU runtime's per-launch work: buffer addresses and the ctypes call).

Kernel ranking (--kernels N): instead of the comparison, fusegrad's step is captured (JIT=2, no graph runners) and
every captured kernel is run alone on the captured buffers, the step's own inputs filled in, best of --kernel-reps
runs; the N slowest are printed with their share of the sum. Set OMP_NUM_THREADS=1 on a shared machine: one thread's
time is steadier than two threads' (another process on the other core halves a statically split kernel).

Usage: python bench/train.py [--steps N] [--quick] [--cases gpt,convnet] [--peers torch,tinygrad] [--null] [--cold]
[--kernels N];
`--help` lists the model-size flags (tiny settings make a smoke test). Missing peers are reported and skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

os.environ.setdefault("DEV", "CPU")  # the reference system may pick another backend otherwise

Batch = tuple[np.ndarray, np.ndarray]  # (inputs, integer targets)
Weights = dict[str, np.ndarray]  # state-dict name -> initial value, copied into every peer
LOSS_RTOL = 1e-3
SETTLE = 0.05  # seconds of pause before each peer's turn (train)
PEERS = ("torch", "tinygrad")


@dataclass(frozen=True, slots=True)
class Case:
    """One model to train: its settings, its batches, and what a step processes (for the rate)."""

    name: str
    title: str
    settings: argparse.Namespace
    batches: list[Batch]
    unit: str  # "tokens" or "images"
    per_step: int


@dataclass
class Trainer:
    """One peer's training loop for one case: `prepare` turns a batch into its tensors (untimed), `step` trains on them
    and returns the loss tensor. `jit` is fusegrad's TinyJit (its captured kernels are timed for the overhead)."""

    prepare: Callable[[Batch], Any]
    step: Callable[[Any], Any]
    jit: Any = None


@dataclass(frozen=True, slots=True)
class Overhead:
    """Seconds of one replay call (not reading the loss) outside its kernels' C calls, and the kernels it ran."""

    seconds: float
    kernels: int


@dataclass
class Run:
    """What one peer did on one case: seconds and loss of every step, warm-up first; fusegrad's replay overheads."""

    seconds: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    overheads: list[Overhead] = field(default_factory=list)


# *** the transformer, in each system ***


def gradients(params: list[Any]) -> list[Any]:
    """The parameters' gradients, realized with the loss before fusegrad's optimizer step: the loss is then that of the
    weights before the update (as torch reports it), and the forward runs once. Realizing the loss after or with the
    update (`opt.step(); loss.realize()`, or `Tensor.realize(loss, *opt.schedule_step())`) runs the forward a second
    time: 1.2x the kernels and 1.3x the flops of the gpt step, and in the first form the loss of the updated weights."""
    return [p.grad for p in params if p.grad is not None]


def initial_weights(state: dict[str, Any]) -> Weights:
    """A fusegrad state dict as numpy arrays, realized in place first: the values the training steps will start from."""
    from fusegrad import Tensor

    Tensor.realize(*state.values())
    return {k: v.numpy() for k, v in state.items()}


def gpt_fusegrad(case: Case) -> tuple[Trainer, Weights]:
    """fusegrad's GPT from the examples, AdamW, the step under TinyJit; its initial weights seed the other peers."""
    from fusegrad import Tensor
    from fusegrad.engine.jit import TinyJit
    from fusegrad.examples.gpt import GPT, GPTConfig
    from fusegrad.nn import optim
    from fusegrad.nn.state import get_parameters, get_state_dict

    s = case.settings
    Tensor.manual_seed(s.seed)
    model = GPT(GPTConfig(s.vocab, s.context, s.dim, s.heads, s.layers))
    opt = optim.AdamW(get_parameters(model), lr=s.lr, weight_decay=0.01)

    @TinyJit
    @Tensor.train()
    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = model.loss(x, y).backward()
        Tensor.realize(loss, *gradients(opt.params))  # see gradients
        opt.step()
        return loss

    def prepare(batch: Batch) -> tuple[Tensor, Tensor]:
        return Tensor(batch[0]).realize(), Tensor(batch[1]).realize()

    weights = initial_weights(get_state_dict(model))
    return Trainer(prepare, lambda xy: step(*xy), step), weights


def torch_gpt_block(s: argparse.Namespace) -> Any:
    """One pre-norm block's modules, named as in fusegrad.examples.gpt.Block."""
    from torch import nn

    attention = nn.ModuleDict({"qkv": nn.Linear(s.dim, 3 * s.dim), "out": nn.Linear(s.dim, s.dim)})
    return nn.ModuleDict({"norm1": nn.LayerNorm(s.dim), "norm2": nn.LayerNorm(s.dim), "attn": attention,
                          "up": nn.Linear(s.dim, 4 * s.dim), "down": nn.Linear(4 * s.dim, s.dim)})  # fmt: skip


def torch_gpt_forward(model: Any, ids: Any, heads: int) -> Any:
    """(B, T) ids -> (B, T, vocab) logits, computed as fusegrad.examples.gpt.GPT does."""
    import torch
    import torch.nn.functional as F

    x = model["tokens"](ids) + model["positions"](torch.arange(ids.shape[1]))  # (B, T, C)
    for block in model["blocks"]:
        b, t, c = x.shape
        # (B, T, 3C) -> (3, B, heads, T, C/heads)
        qkv = block["attn"]["qkv"](block["norm1"](x)).reshape(b, t, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        x = x + block["attn"]["out"](y.transpose(1, 2).reshape(b, t, c))  # (B, heads, T, C/heads) -> (B, T, C)
        x = x + block["down"](F.gelu(block["up"](block["norm2"](x)), approximate="tanh"))
    return model["head"](model["norm"](x))


def gpt_torch(case: Case, weights: Weights) -> Trainer:
    """The same transformer in torch: a ModuleDict with fusegrad's parameter names, AdamW with the same settings."""
    import torch
    from torch import nn

    torch.set_num_threads(2)
    s = case.settings
    model = nn.ModuleDict({
        "tokens": nn.Embedding(s.vocab, s.dim), "positions": nn.Embedding(s.context, s.dim),
        "blocks": nn.ModuleList([torch_gpt_block(s) for _ in range(s.layers)]),
        "norm": nn.LayerNorm(s.dim), "head": nn.Linear(s.dim, s.vocab)})  # fmt: skip
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in weights.items()}, strict=True)
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)

    def step(xy: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        opt.zero_grad()
        logits = torch_gpt_forward(model, xy[0], s.heads)
        loss = nn.functional.cross_entropy(logits.reshape(-1, s.vocab), xy[1].reshape(-1))
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves backward unannotated
        opt.step()
        return loss

    return Trainer(lambda b: (torch.from_numpy(b[0]).long(), torch.from_numpy(b[1]).long()), step)


def tinygrad_gpt_forward(model: dict[str, Any], ids: Any, heads: int) -> Any:
    """(B, T) ids -> (B, T, vocab) logits with tinygrad's layers, computed as fusegrad.examples.gpt.GPT does."""
    from tinygrad.tensor import Tensor

    x = model["tokens"](ids) + model["positions"](Tensor.arange(ids.shape[1]))  # (B, T, C)
    for block in model["blocks"]:
        b, t, c = x.shape
        # (B, T, 3C) -> (3, B, heads, T, C/heads)
        qkv = block["attn"]["qkv"](block["norm1"](x)).reshape(b, t, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
        y = qkv[0].scaled_dot_product_attention(qkv[1], qkv[2], is_causal=True)
        x = x + block["attn"]["out"](y.transpose(1, 2).reshape(b, t, c))  # (B, heads, T, C/heads) -> (B, T, C)
        x = x + block["down"](block["up"](block["norm2"](x)).gelu())
    return model["head"](model["norm"](x))


def gpt_tinygrad(case: Case, weights: Weights) -> Trainer:
    """The same transformer with tinygrad's nn layers in nested dicts (the same state-dict names) and its TinyJit."""
    from tinygrad import nn
    from tinygrad.engine.jit import TinyJit
    from tinygrad.helpers import Context
    from tinygrad.tensor import Tensor

    s = case.settings
    blocks = [{"norm1": nn.LayerNorm(s.dim), "norm2": nn.LayerNorm(s.dim),
               "attn": {"qkv": nn.Linear(s.dim, 3 * s.dim), "out": nn.Linear(s.dim, s.dim)},
               "up": nn.Linear(s.dim, 4 * s.dim), "down": nn.Linear(4 * s.dim, s.dim)}
              for _ in range(s.layers)]  # fmt: skip
    model = {"tokens": nn.Embedding(s.vocab, s.dim), "positions": nn.Embedding(s.context, s.dim), "blocks": blocks,
             "norm": nn.LayerNorm(s.dim), "head": nn.Linear(s.dim, s.vocab)}  # fmt: skip
    nn.state.load_state_dict(model, {k: Tensor(v.copy()) for k, v in weights.items()}, verbose=False)
    opt = nn.optim.AdamW(nn.state.get_parameters(model), lr=s.lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01)

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Any:
        with Context(TRAINING=1):  # type: ignore[no-untyped-call]  # tinygrad 0.14's training mode
            opt.zero_grad()
            loss = tinygrad_gpt_forward(model, x, s.heads).sparse_categorical_crossentropy(y).backward()
            return loss.realize(*opt.schedule_step())

    return Trainer(lambda b: (Tensor(b[0]).realize(), Tensor(b[1]).realize()), lambda xy: step(*xy))


# *** the convnet, in each system ***


class InlineConvNet:
    """Used only when fusegrad.examples.mnist is missing: the same layers as its ConvNet, (B, 1, 28, 28) -> (B, 10)."""

    def __init__(self, width: int) -> None:
        from fusegrad import nn

        self.conv1, self.norm1 = nn.Conv2d(1, width, 3), nn.BatchNorm(width)
        self.conv2, self.norm2 = nn.Conv2d(width, 2 * width, 3), nn.BatchNorm(2 * width)
        self.head = nn.Linear(2 * width * 5 * 5, 10)

    def __call__(self, x: Any) -> Any:
        x = self.norm1(self.conv1(x)).relu().max_pool2d()  # (B, 1, 28, 28) -> (B, w, 26, 26) -> (B, w, 13, 13)
        x = self.norm2(self.conv2(x)).relu().max_pool2d()  # -> (B, 2w, 11, 11) -> (B, 2w, 5, 5)
        return self.head(x.flatten(1))  # (B, 2w*25) -> (B, 10)


def fusegrad_convnet() -> tuple[type, str]:
    """The convnet class and where it comes from."""
    try:
        from fusegrad.examples.mnist import ConvNet
    except ImportError as e:
        return InlineConvNet, f"defined in bench/train.py (fusegrad.examples.mnist missing: {e})"
    return ConvNet, "fusegrad.examples.mnist.ConvNet"


def running_stats(model: Any) -> list[Any]:
    """The batchnorms' running statistics, realized with each step so every peer does torch's work."""
    norms = (model.norm1, model.norm2)
    return [stat for norm in norms for stat in (norm.running_mean, norm.running_var)]


def convnet_fusegrad(case: Case) -> tuple[Trainer, Weights]:
    """The examples' convnet (or the inline one), Adam, the step under TinyJit; its weights seed the other peers."""
    from fusegrad import Tensor
    from fusegrad.engine.jit import TinyJit
    from fusegrad.nn.optim import Adam
    from fusegrad.nn.state import get_parameters, get_state_dict

    s = case.settings
    Tensor.manual_seed(s.seed)
    model = fusegrad_convnet()[0](s.width)
    opt = Adam(get_parameters(model), lr=s.lr)

    @TinyJit
    @Tensor.train()
    def step(images: Tensor, labels: Tensor) -> Tensor:
        opt.zero_grad()
        loss: Tensor = model(images.float() / 255.0).sparse_categorical_crossentropy(labels).backward()
        Tensor.realize(loss, *gradients(opt.params), *running_stats(model))  # see gradients
        opt.step()
        return loss

    def prepare(batch: Batch) -> tuple[Tensor, Tensor]:
        return Tensor(batch[0]).realize(), Tensor(batch[1]).realize()

    weights = initial_weights(get_state_dict(model))
    return Trainer(prepare, lambda xy: step(*xy), step), weights


def convnet_torch(case: Case, weights: Weights) -> Trainer:
    """The same convnet in torch (BatchNorm2d in training mode), Adam with the same settings."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.set_num_threads(2)
    w = case.settings.width
    model = nn.ModuleDict({"conv1": nn.Conv2d(1, w, 3), "norm1": nn.BatchNorm2d(w), "conv2": nn.Conv2d(w, 2 * w, 3),
                           "norm2": nn.BatchNorm2d(2 * w), "head": nn.Linear(2 * w * 5 * 5, 10)})  # fmt: skip
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in weights.items()}, strict=True)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=case.settings.lr, betas=(0.9, 0.999), eps=1e-8)

    def step(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        opt.zero_grad()
        x = F.max_pool2d(F.relu(model["norm1"](model["conv1"](batch[0].float() / 255.0))), 2)
        x = F.max_pool2d(F.relu(model["norm2"](model["conv2"](x))), 2)
        loss = F.cross_entropy(model["head"](x.flatten(1)), batch[1])
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves backward unannotated
        opt.step()
        return loss

    return Trainer(lambda b: (torch.from_numpy(b[0]), torch.from_numpy(b[1]).long()), step)


def convnet_tinygrad(case: Case, weights: Weights) -> Trainer:
    """The same convnet with tinygrad's nn layers and TinyJit, Adam with the same settings."""
    from tinygrad import nn
    from tinygrad.engine.jit import TinyJit
    from tinygrad.helpers import Context
    from tinygrad.tensor import Tensor

    w = case.settings.width
    model = argparse.Namespace(conv1=nn.Conv2d(1, w, 3), norm1=nn.BatchNorm(w), conv2=nn.Conv2d(w, 2 * w, 3),
                               norm2=nn.BatchNorm(2 * w), head=nn.Linear(2 * w * 5 * 5, 10))  # fmt: skip
    nn.state.load_state_dict(model, {k: Tensor(v.copy()) for k, v in weights.items()}, verbose=False)
    opt = nn.optim.Adam(nn.state.get_parameters(model), lr=case.settings.lr, b1=0.9, b2=0.999, eps=1e-8)

    @TinyJit
    def step(images: Tensor, labels: Tensor) -> Any:
        # tinygrad 0.14's training mode: batch statistics, optimizer allowed
        with Context(TRAINING=1):  # type: ignore[no-untyped-call]  # tinygrad's Context is not annotated
            opt.zero_grad()
            x = model.norm1(model.conv1(images.float() / 255.0)).relu().max_pool2d()
            x = model.norm2(model.conv2(x)).relu().max_pool2d()
            loss = model.head(x.flatten(1)).sparse_categorical_crossentropy(labels).backward()
            return loss.realize(*opt.schedule_step(), *running_stats(model))

    return Trainer(lambda b: (Tensor(b[0]).realize(), Tensor(b[1]).realize()), lambda xy: step(*xy))


MAKERS: dict[str, dict[str, Callable[..., Any]]] = {
    "gpt": {"fusegrad": gpt_fusegrad, "torch": gpt_torch, "tinygrad": gpt_tinygrad},
    "convnet": {"fusegrad": convnet_fusegrad, "torch": convnet_torch, "tinygrad": convnet_tinygrad},
}


# *** measuring ***


def make_cases(args: argparse.Namespace) -> list[Case]:
    """The cases asked for, each with warm-up + timed batches drawn from one seeded generator."""
    rng = np.random.default_rng(args.seed)
    n = args.warmup + args.steps
    cases = []
    if "gpt" in args.cases:
        rows = [rng.integers(0, args.vocab, (args.batch, args.context + 1), dtype=np.int32) for _ in range(n)]
        title = (f"gpt: vocab {args.vocab}, context {args.context}, dim {args.dim}, {args.heads} heads, "
                 f"{args.layers} layers, batch {args.batch}, AdamW; random token ids")  # fmt: skip
        batches = [(r[:, :-1].copy(), r[:, 1:].copy()) for r in rows]
        cases.append(Case("gpt", title, args, batches, "tokens", args.batch * args.context))
    if "convnet" in args.cases:
        shape = (args.conv_batch, 1, 28, 28)
        batches = [(rng.integers(0, 256, shape, dtype=np.uint8), rng.integers(0, 10, args.conv_batch, dtype=np.int32))
                   for _ in range(n)]  # fmt: skip
        title = (f"convnet ({fusegrad_convnet()[1]}): width {args.width}, batch {args.conv_batch} of 1x28x28, Adam; "
                 "random images and labels")  # fmt: skip
        cases.append(Case("convnet", title, args, batches, "images", args.conv_batch))
    return cases


def turns_of(steps: int, turns: int) -> list[int]:
    """How many timed steps each turn holds: `steps` split into `turns` (at most one per step), the first ones one
    longer when it does not divide."""
    turns = max(1, min(turns, steps))
    return [steps // turns + (i < steps % turns) for i in range(turns)]


def train(trainers: dict[str, Trainer], case: Case, args: argparse.Namespace) -> dict[str, Run | None]:
    """Every peer trains on every batch of the case, one timed step each (inputs prepared beforehand, the loss read
    back as a float), as a user runs them: a jitted fusegrad step replays through its graph runners. Each peer takes
    its warm-up steps first; then the peers take turns (`--turns`), each turn a SETTLE pause (the previous peer's
    OpenMP threads spin for milliseconds and would take a core) and then that peer's share of the timed steps back to
    back, so that a minute in which the shared host runs slow falls on every peer alike (in blocks, one peer's whole
    run could land in it). Then a jitted fusegrad step takes the timed batches again, untimed for the rate, to
    measure its replay's Python overhead (overhead_steps). A peer whose step raises is reported and left out (None)."""
    prepared: dict[str, list[Any]] = {}
    runs: dict[str, Run | None] = {}
    for peer, trainer in trainers.items():
        prepared[peer], runs[peer] = [trainer.prepare(b) for b in case.batches], Run()
    start = 0
    for share in [args.warmup, *turns_of(len(case.batches) - args.warmup, args.turns)]:
        for peer, trainer in trainers.items():
            run = runs[peer]
            if run is None:
                continue
            time.sleep(SETTLE)
            try:
                for inputs in prepared[peer][start : start + share]:
                    step_once(trainer, run, inputs)
            except Exception as e:  # one failing peer leaves the others standing
                if peer == "fusegrad":
                    raise
                print(f"{peer}: failed ({type(e).__name__}: {e})")
                runs[peer] = None
        start += share
    ours = trainers["fusegrad"]
    if ours.jit is not None and len(case.batches) > args.warmup:
        overhead_steps(ours, runs["fusegrad"], prepared["fusegrad"][args.warmup :])  # type: ignore[arg-type]
    return runs


def graphs_off(trainer: Trainer) -> contextlib.AbstractContextManager[Any]:
    """JIT=2 for a fusegrad trainer's steps (no graph runners); nothing for the peers."""
    if trainer.jit is None:
        return contextlib.nullcontext()
    from fusegrad.helpers import Context

    return Context(JIT=2)


def step_once(trainer: Trainer, run: Run, inputs: Any) -> None:
    """One timed training step."""
    start = time.perf_counter()
    out = trainer.step(inputs)
    run.losses.append(float(out.item()))
    run.seconds.append(time.perf_counter() - start)


def overhead_steps(trainer: Trainer, run: Run, batches: list[Any]) -> None:
    """One more step per batch, each replay's Python outside its kernels' C calls recorded (see kernel_clock). These
    replay without graph runners (JIT=2; on CPU a graph runs a batch of kernels in one generated C call, which the
    clock cannot see into), so the captured step is regrouped without them first and with them again after: the timed
    steps ran graphed, as users' steps do (bench/overhead.py measures graphed replays)."""
    captured = trainer.jit.captured
    # the clock's timed functions go in before the replay prepares again: a CPU replay keeps the kernels' functions it
    # found then (Runner.direct_launch) and calls them bare
    with graphs_off(trainer), kernel_clock(captured.items) as spent:
        captured._reset_replay()  # the next replay prepares again, now without graph runners
        for inputs in batches:
            spent.clear()
            start = time.perf_counter()
            out = trainer.step(inputs)
            call, in_call = time.perf_counter() - start, list(spent)
            out.item()
            run.overheads.append(replay_overhead(call, in_call, len(captured.items)))
    captured._reset_replay()  # and again with the kernels' own functions and the graph runners


def replay_overhead(call: float, spent: list[float], kernels: int) -> Overhead:
    """A replay's time outside its kernels' C calls; every kernel must have been timed."""
    if len(spent) != kernels:
        raise RuntimeError(f"train: kernel runs timed in a replay: got {len(spent)}, expected {kernels}")
    return Overhead(call - sum(spent), kernels)


class TimedCFunction:
    """Stands in for a kernel's ctypes function: each call adds its seconds to `spent`; any other attribute (argtypes,
    restype) is read from and written to the function itself."""

    def __init__(self, fxn: Any, spent: list[float]) -> None:
        object.__setattr__(self, "fxn", fxn)
        object.__setattr__(self, "spent", spent)

    def __call__(self, *args: Any) -> None:
        start = time.perf_counter()
        self.fxn(*args)
        self.spent.append(time.perf_counter() - start)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fxn, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.fxn, name, value)


@contextlib.contextmanager
def kernel_clock(items: list[Any]) -> Iterator[list[float]]:
    """While open, each captured kernel's C function adds its own run time to the yielded list; then the functions are
    restored. Raises ValueError for a runner without a C function (a copy, a device other than CPU)."""
    programs = {}
    for ei in items:  # one program may serve several items (identical kernels share a runner)
        program: Any = getattr(ei.prg, "_prg", None)  # the device's program object (CPUProgram on CPU)
        if getattr(program, "fxn", None) is None:
            raise ValueError(f"kernel_clock: cannot time a {type(ei.prg).__name__} runner: expected a C kernel")
        programs[id(program)] = (program, program.fxn)
    spent: list[float] = []
    try:
        for program, fxn in programs.values():
            program.fxn = TimedCFunction(fxn, spent)
        yield spent
    finally:
        for program, fxn in programs.values():
            program.fxn = fxn


def wrapper_cost(calls: int = 2000, rounds: int = 5) -> float:
    """Seconds that TimedCFunction adds to a C call outside its timed window: libc's abs() called bare and wrapped,
    as a CPU replay calls a kernel (the bare function with its argument list); the smallest per-call time of `rounds`
    rounds of each."""
    import ctypes

    bare = ctypes.CDLL(None).abs
    bare.argtypes, bare.restype = [ctypes.c_int], ctypes.c_int

    def per_call(fxn: Any) -> float:
        start = time.perf_counter()
        args = [-1]
        for _ in range(calls):
            fxn(*args)
        return (time.perf_counter() - start) / calls

    wrapped = TimedCFunction(bare, [])
    times = [(per_call(bare), per_call(wrapped)) for _ in range(rounds)]
    return max(0.0, min(w for _, w in times) - min(b for b, _ in times))


def null_overhead(case: Case) -> Overhead:
    """The time of a replay of the case's fusegrad step jitted on the NULL device, where kernels do no work."""
    from fusegrad.helpers import Context

    with Context(DEV="NULL"):
        trainer, _ = MAKERS[case.name]["fusegrad"](case)
        inputs = trainer.prepare(case.batches[0])
        for _ in range(2):  # the eager call and the capture
            trainer.jit(*inputs)
        walls = []
        for _ in range(3):
            start = time.perf_counter()
            trainer.jit(*inputs)
            walls.append(time.perf_counter() - start)
    return Overhead(min(walls), len(trainer.jit.captured.items))


# *** reporting ***


def rate_cell(run: Run | None, warmup: int, per_step: int) -> str:
    if run is None:
        return f"{'failed':>36s}"
    timed = run.seconds[warmup:]
    med = statistics.median(timed)
    return f"{med * 1e3:11.1f}ms {min(timed) * 1e3:10.1f}ms {per_step / med:12,.0f}"


def print_rates(case: Case, runs: dict[str, Run | None], warmup: int) -> None:
    """One row per peer: first call, capture call, median and best step, rate, fusegrad's rate over the peer's."""
    print(f"\n{'peer':10s}{'1st call':>10s}{'2nd call':>10s}{'median step':>13s}{'best step':>12s}"
          f"{case.unit + '/s':>13s}   fusegrad/peer")  # fmt: skip
    ours = runs.get("fusegrad")
    for peer, run in runs.items():
        calls = f"{run.seconds[0]:9.2f}s{run.seconds[1]:9.2f}s" if run is not None else " " * 20
        ratio = "-"
        if run is not None and ours is not None:
            ratio = f"{statistics.median(run.seconds[warmup:]) / statistics.median(ours.seconds[warmup:]):.3g}x"
        print(f"{peer:10s}{calls}{rate_cell(run, warmup, case.per_step)}   {ratio if peer != 'fusegrad' else ''}")


def loss_agreement(runs: dict[str, Run | None], steps: int) -> dict[str, float]:
    """Each peer's largest relative loss difference from torch over the first `steps` steps (NaN if a loss is)."""
    ref = runs.get("torch")
    if ref is None:
        return {}
    diffs = {}
    for peer, run in runs.items():
        if run is not None and peer != "torch":
            pairs = zip(run.losses[:steps], ref.losses[:steps], strict=True)
            rel = [abs(a - b) / max(abs(b), 1e-12) for a, b in pairs]
            diffs[peer] = math.nan if any(math.isnan(d) for d in rel) else max(rel)  # max() would skip a NaN
    return diffs


def print_losses(runs: dict[str, Run | None], steps: int) -> list[str]:
    """The first `steps` losses of every peer side by side and their agreement with torch; returns the peers whose
    losses differ from torch's by more than LOSS_RTOL."""
    alive = {peer: run for peer, run in runs.items() if run is not None}
    print(f"\n{'loss at step':14s}" + "".join(f"{peer:>12s}" for peer in alive))
    for i in range(min(steps, *(len(r.losses) for r in alive.values()))):
        print(f"{i + 1:<14d}" + "".join(f"{run.losses[i]:12.6f}" for run in alive.values()))
    diffs = loss_agreement(runs, steps)
    if not diffs:
        print("no torch run: losses not checked")
    bad = [peer for peer, diff in diffs.items() if not diff <= LOSS_RTOL]
    for peer, diff in diffs.items():
        verdict = "MISMATCH" if peer in bad else "ok"
        print(f"{peer} vs torch: max relative difference {diff:.2e} ({verdict}, tolerance {LOSS_RTOL:g})")
    return bad


def print_overhead(run: Run, null: Overhead | None, wrapper: float) -> None:
    """First and capture call of fusegrad's jitted step, and the Python overhead of its replays: the smallest over the
    timed steps, less the timing wrapper's own cost per kernel."""
    best = min(run.overheads, key=lambda o: o.seconds)
    overhead = best.seconds - best.kernels * wrapper
    # a replay's own Python per kernel is now about as small as the wrapper's cost, itself measured with noise: a
    # difference below zero says the overhead is too small for this timing to resolve, not that it is negative
    unresolved = " (below what this timing resolves)" if overhead < 0 else ""
    overhead = max(overhead, 0.0)
    print(f"fusegrad TinyJit: first call {run.seconds[0]:.2f} s (schedule, compile, run), capture call "
          f"{run.seconds[1]:.2f} s (schedule, run: the kernels are already compiled)")  # fmt: skip
    print(f"fusegrad Python overhead per replayed step: {overhead * 1e6:,.0f} us for {best.kernels} kernels = "
          f"{overhead * 1e6 / best.kernels:.1f} us per kernel (replay time minus the kernels' own, less the timing "
          f"wrapper's {wrapper * 1e6:.2f} us per kernel){unresolved}")  # fmt: skip
    if null is not None:
        print(f"  cross-check on the NULL device (kernels run nothing): {null.seconds * 1e6:,.0f} us per replay of "
              f"{null.kernels} kernels = {null.seconds * 1e6 / null.kernels:.1f} us per kernel")  # fmt: skip


def kernel_times(case: Case, reps: int) -> tuple[dict[str, float], int]:
    """Each kernel of fusegrad's captured step run alone on the captured buffers (the step's inputs filled in): best
    seconds of `reps` runs, summed per kernel name; and how many items could not run alone (no buffer for a slot)."""
    trainer, _ = MAKERS[case.name]["fusegrad"](case)
    prepared = [trainer.prepare(b) for b in case.batches]
    with graphs_off(trainer):
        for inputs in (prepared * 3)[:3]:  # the eager call, the capture, one replay
            trainer.step(inputs).item()
    captured = trainer.jit.captured
    flat = [t.uop.buffer for t in (prepared * 3)[2]]
    items = captured.items
    for (j, i), k in captured.input_replace.items():
        if k < len(flat):
            items[j].bufs[i] = flat[k]
    times: dict[str, float] = {}
    skipped = 0
    for ei in items:
        if not hasattr(ei.prg, "p") or any(b is None for b in ei.bufs):
            skipped += 1  # a copy, or a view of an input the step makes itself
            continue
        best = math.inf
        for _ in range(reps):
            start = time.perf_counter()
            ei.prg(ei.bufs, {}, wait=True)
            best = min(best, time.perf_counter() - start)
        times[ei.prg.p.name] = times.get(ei.prg.p.name, 0.0) + best
    return times, skipped


def print_kernel_ranking(case: Case, top: int, reps: int) -> None:
    """The `top` slowest kernels of fusegrad's step (see kernel_times) and their share of the sum."""
    times, skipped = kernel_times(case, reps)
    total = sum(times.values())
    threads = os.environ.get("OMP_NUM_THREADS", "all cores")
    print(f"{len(times)} kernels timed alone (best of {reps}, OMP_NUM_THREADS={threads}), sum {total * 1e3:.2f} ms; "
          f"{skipped} items not timed (copies, views of inputs)")  # fmt: skip
    for name, t in sorted(times.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {t * 1e3:8.3f} ms  {100 * t / total:5.1f}%  {name}")


def run_peers(case: Case, args: argparse.Namespace) -> dict[str, Run | None]:
    """Train the case with fusegrad and each peer, from fusegrad's initial weights, the peers taking turns (train)."""
    trainer, weights = MAKERS[case.name]["fusegrad"](case)
    trainers = {"fusegrad": trainer}
    failed: list[str] = []
    for peer in args.peers:
        try:
            trainers[peer] = MAKERS[case.name][peer](case, weights)
        except ImportError as e:  # a peer that is not installed is reported, not fatal
            print(f"{peer}: skipped ({type(e).__name__}: {e})")
        except Exception as e:  # one failing peer leaves the others standing
            print(f"{peer}: failed ({type(e).__name__}: {e})")
            failed.append(peer)
    runs = train(trainers, case, args)
    for peer, run in runs.items():
        if run is not None:
            median = statistics.median(run.seconds[args.warmup :]) * 1e3
            print(f"{peer:10s}done: median step {median:.1f} ms", flush=True)
    return runs | dict.fromkeys(failed)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--steps", type=int, default=15, help="timed steps per peer and case, after the warm-up (default 15)")
    add("--turns", type=int, default=5, help="turns the peers take over the timed steps (default 5)")
    add("--warmup", type=int, default=2, help="untimed first steps: the call and the capture (default 2, min 2)")
    add("--quick", action="store_true", help="1 timed step")
    add("--check", type=int, default=3, help="first steps whose losses are compared with torch's (default 3)")
    add("--cases", default="gpt,convnet", help="comma-separated: gpt, convnet (default both)")
    add("--peers", default=",".join(PEERS), help="comma-separated peers beside fusegrad (default torch,tinygrad)")
    add("--null", action="store_true", help="also time fusegrad's replay on the NULL device (slow: schedules again)")
    add("--cold", action="store_true", help="CACHELEVEL=0: compile every kernel in the first call")
    ranking = "rank instead of compare: the N slowest kernels of fusegrad's step, each timed alone"
    add("--kernels", type=int, default=0, metavar="N", help=ranking)
    add("--kernel-reps", type=int, default=10, help="runs per kernel for --kernels, best kept (default 10)")
    add("--seed", type=int, default=0, help="seed of the weights and batches (default 0)")
    add("--lr", type=float, default=3e-3, help="learning rate of both optimizers (default 3e-3)")
    for flag, default, what in (("vocab", 98, "gpt vocabulary"), ("context", 64, "gpt context"),
                                ("dim", 128, "gpt width"), ("heads", 4, "gpt heads"), ("layers", 2, "gpt blocks"),
                                ("batch", 16, "gpt batch"), ("conv-batch", 64, "convnet batch"),
                                ("width", 16, "convnet channels of the first conv")):  # fmt: skip
        add(f"--{flag}", type=int, default=default, help=f"{what} (default {default})")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps = 1
    args.cases, args.peers = args.cases.split(","), [p for p in args.peers.split(",") if p]
    if unknown := sorted(set(args.cases) - set(MAKERS)) + sorted(set(args.peers) - set(PEERS)):
        parser.error(f"unknown case or peer: got {unknown}, expected cases {list(MAKERS)} and peers {list(PEERS)}")
    sizes = (args.steps, args.turns, args.check, args.vocab, args.context, args.dim, args.heads, args.layers,
             args.batch, args.conv_batch, args.width)  # fmt: skip
    if args.warmup < 2 or min(sizes) < 1 or args.conv_batch < 2 or args.kernels < 0 or args.kernel_reps < 1:
        parser.error("--warmup must be at least 2, --conv-batch at least 2, --kernels at least 0, the other counts and "
                     "sizes at least 1")  # fmt: skip
    if args.dim % args.heads:
        parser.error(f"--dim must be a multiple of --heads: got {args.dim} and {args.heads}")
    return args


def set_cold() -> None:
    """Turn off the persistent compile caches of fusegrad and tinygrad (already imported ones too)."""
    os.environ["CACHELEVEL"] = "0"
    for name in ("fusegrad.helpers", "tinygrad.helpers"):
        with contextlib.suppress(ImportError):
            __import__(name, fromlist=["CACHELEVEL"]).CACHELEVEL.value = 0


def main(argv: list[str] | None = None) -> int:
    """Run the bench; the exit status is 1 when some peer's losses disagree with torch's."""
    args = parse_args(argv)
    if args.cold:
        set_cold()
    mismatched = []
    wrapper = wrapper_cost()
    for case in make_cases(args):
        print(f"\n== {case.title}", flush=True)
        if args.kernels:
            print_kernel_ranking(case, args.kernels, args.kernel_reps)
            continue
        runs = run_peers(case, args)
        null = null_overhead(case) if args.null else None
        print_rates(case, runs, args.warmup)
        mismatched += [f"{case.name}: {peer}" for peer in print_losses(runs, min(args.check, len(case.batches)))]
        print_overhead(runs["fusegrad"], null, wrapper)  # type: ignore[arg-type]  # fusegrad's run never fails
    if mismatched:
        print(f"\nlosses disagree with torch: {', '.join(mismatched)}")
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
