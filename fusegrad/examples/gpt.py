"""Train a small character-level transformer on the Python standard library's own source files, on the CPU.

Run `python -m fusegrad.examples.gpt` (or `--help`). Nothing is downloaded: the text is the `.py` files every Python
install ships (`fusegrad.nn.datasets.stdlib_corpus`), with whole files held out for validation. The training step is
captured by `TinyJit` on its second call and replayed from then on. At the end it prints the held-out loss next to the
unigram baseline (the loss of predicting every character from its frequency alone), a sample of generated text, and
saves a safetensors checkpoint that `--resume` continues from. `mpirun -np 2 python -m fusegrad.examples.gpt
--data-parallel` trains on 2 processes (fusegrad.distributed), each on its own slice of the training text.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from fusegrad import Tensor, distributed
from fusegrad.distributed import DistributedDataParallel
from fusegrad.engine.jit import TinyJit
from fusegrad.helpers import DEV
from fusegrad.nn import Embedding, LayerNorm, Linear, optim
from fusegrad.nn.datasets import Corpus, stdlib_corpus
from fusegrad.nn.lr_schedules import cosine_with_warmup
from fusegrad.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_load_metadata, safe_save


@dataclass(frozen=True, slots=True)
class GPTConfig:
    """The shape of the model; saved in the checkpoint so `--resume` rebuilds the same one."""

    vocab_size: int
    context: int = 64
    dim: int = 128
    heads: int = 4
    layers: int = 2


class Attention:
    """Causal multi-head self-attention: (B, T, C) -> (B, T, C)."""

    def __init__(self, cfg: GPTConfig) -> None:
        self.heads = cfg.heads
        self.qkv = Linear(cfg.dim, 3 * cfg.dim)
        self.out = Linear(cfg.dim, cfg.dim)

    def __call__(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        # (B, T, 3C) -> (3, B, heads, T, C/heads)
        qkv = self.qkv(x).reshape(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = qkv[0].scaled_dot_product_attention(qkv[1], qkv[2], is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, c))  # (B, heads, T, C/heads) -> (B, T, C)


class Block:
    """Pre-norm transformer block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: GPTConfig) -> None:
        self.norm1, self.norm2 = LayerNorm(cfg.dim), LayerNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.up, self.down = Linear(cfg.dim, 4 * cfg.dim), Linear(4 * cfg.dim, cfg.dim)

    def __call__(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.down(self.up(self.norm2(x)).gelu())


class GPT:
    """Token and position embeddings, `layers` blocks, a final norm and a linear head: (B, T) ids -> (B, T, vocab)."""

    def __init__(self, cfg: GPTConfig) -> None:
        self.cfg = cfg
        self.tokens = Embedding(cfg.vocab_size, cfg.dim)
        self.positions = Embedding(cfg.context, cfg.dim)
        self.blocks = [Block(cfg) for _ in range(cfg.layers)]
        self.norm = LayerNorm(cfg.dim)
        self.head = Linear(cfg.dim, cfg.vocab_size)

    def __call__(self, ids: Tensor) -> Tensor:
        t = ids.shape[1]
        x = self.tokens(ids) + self.positions(Tensor.arange(t, device=ids.device))  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def loss(self, ids: Tensor, targets: Tensor) -> Tensor:
        """Mean cross-entropy of the next character."""
        return self(ids).sparse_categorical_crossentropy(targets)


def unigram_loss(train: np.ndarray, val: np.ndarray, vocab_size: int) -> float:
    """Cross-entropy on `val` of predicting each character by its (add-one smoothed) frequency in `train`, in nats."""
    counts = np.bincount(train, minlength=vocab_size).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[val].mean())


def windows(data: np.ndarray, batch: int, context: int, rng: np.random.Generator) -> tuple[Tensor, Tensor]:
    """A batch of random (input, next-character target) windows, each (batch, context) int32."""
    starts = rng.integers(0, len(data) - context - 1, size=batch)
    rows = np.stack([data[s : s + context + 1] for s in starts]).astype(np.int32)
    return Tensor(rows[:, :-1].copy()), Tensor(rows[:, 1:].copy())


def generate(forward: TinyJit[Tensor], prompt: np.ndarray, n: int, cfg: GPTConfig, temperature: float,
             rng: np.random.Generator) -> np.ndarray:  # fmt: skip
    """Sample n characters after `prompt`, one at a time, with a fixed-shape (1, context) jitted forward.

    The window is padded on the right: causal attention keeps later positions from affecting the one read.
    """
    ids = list(prompt.tolist())
    for _ in range(n):
        window = ids[-cfg.context :]
        padded = np.zeros((1, cfg.context), dtype=np.int32)
        padded[0, : len(window)] = window
        logits = forward(Tensor(padded)).numpy()[0, len(window) - 1].astype(np.float64)
        p = np.exp((logits - logits.max()) / temperature)
        ids.append(int(rng.choice(len(p), p=p / p.sum())))
    return np.array(ids[len(prompt) :], dtype=np.uint8)


def save_checkpoint(path: pathlib.Path, model: GPT, opt: optim.Optimizer, step: int) -> None:
    tensors = {f"model.{k}": v for k, v in get_state_dict(model).items()}
    tensors |= {f"optim.{k}": v for k, v in get_state_dict(opt).items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    safe_save(tensors, str(path), metadata={"step": str(step), "config": json.dumps(asdict(model.cfg))})


def load_checkpoint(path: pathlib.Path) -> tuple[GPTConfig, dict[str, Tensor], dict[str, Tensor], int]:
    """(config, model state, optimiser state, step) from a checkpoint written by `save_checkpoint`."""
    if not path.is_file():
        raise SystemExit(f"--resume: no checkpoint at {path} (train without --resume first, or pass --checkpoint)")
    metadata = safe_load_metadata(str(path))[2].get("__metadata__", {})
    if "config" not in metadata or "step" not in metadata:
        raise ValueError(f"--resume: {path} is not a checkpoint of this example (no config/step metadata)")
    tensors = safe_load(str(path))
    model = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    opt = {k.removeprefix("optim."): v for k, v in tensors.items() if k.startswith("optim.")}
    return GPTConfig(**json.loads(metadata["config"])), model, opt, int(metadata["step"])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=1800, help="training steps (default 1800)")
    parser.add_argument("--batch-size", type=int, default=16, help="windows per step (default 16)")
    parser.add_argument("--context", type=int, default=64, help="characters per window (default 64)")
    parser.add_argument("--dim", type=int, default=128, help="model width (default 128)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    parser.add_argument("--layers", type=int, default=2, help="transformer blocks (default 2)")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate of AdamW (default 3e-3)")
    parser.add_argument("--corpus-bytes", type=int, default=2_000_000, help="stdlib text to use (default 2 MB)")
    parser.add_argument("--eval-batches", type=int, default=16, help="held-out batches for the loss (default 16)")
    parser.add_argument("--sample", type=int, default=300, help="characters of text to generate (default 300)")
    parser.add_argument("--checkpoint", default="checkpoints/gpt.safetensors", help="where to save (and resume)")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint for --steps more steps")
    parser.add_argument("--device", default=None, help="device to train on (default: Device.DEFAULT)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights, batches and sampling (default 0)")
    parser.add_argument("--data-parallel", action="store_true",
                        help="train on every rank of the MPI world (under mpirun; the dist extra)")  # fmt: skip
    args = parser.parse_args(argv)
    if min(args.steps, args.eval_batches, args.sample) < 0 or min(args.batch_size, args.context, args.layers) < 1:
        parser.error("--steps/--eval-batches/--sample must be >= 0; --batch-size/--context/--layers >= 1")
    if args.dim % args.heads:
        parser.error(f"--dim ({args.dim}) must be a multiple of --heads ({args.heads})")
    return args


def evaluate(model: GPT, data: np.ndarray, batches: int, batch_size: int, context: int) -> float:
    """Mean held-out loss over `batches` fixed windows (the same windows every time)."""
    rng = np.random.default_rng(1234)
    eval_step = TinyJit(lambda x, y: model.loss(x, y).realize())
    with Tensor.test():
        losses = [eval_step(*windows(data, batch_size, context, rng)).item() for _ in range(batches)]
    return float(np.mean(losses)) if losses else math.nan


def make_step(
    model: GPT, opt: optim.Optimizer, ddp: DistributedDataParallel | None
) -> Callable[[Tensor, Tensor], Tensor]:
    """The training step, captured by TinyJit; data-parallel, the gradient averaging captured inside it."""

    @Tensor.train()
    def forward_backward(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = model.loss(x, y).backward()
        # loss and gradients in one schedule (one forward), before the update writes the weights they read
        Tensor.realize(loss, *[p.grad for p in opt.params if p.grad is not None])
        return loss

    @TinyJit
    @Tensor.train()  # the optimiser only steps in training mode
    def step(x: Tensor, y: Tensor) -> Tensor:
        loss = forward_backward(x, y)
        opt.step()
        return loss

    if ddp is None:
        return step

    @TinyJit
    @Tensor.train()
    def step_data_parallel(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = model.loss(x, y).backward()
        # the gradients are realized bucket by bucket with the loss, each bucket's averaging started as soon as it is
        # ready; the averaging is captured with the kernels and replays inside this one jit
        ddp.sync_gradients(loss)
        opt.step()
        return loss

    return step_data_parallel


def train(args: argparse.Namespace, corpus: Corpus) -> None:
    rank, world, ddp = 0, 1, None
    if args.data_parallel:
        rank, world = distributed.init().rank, distributed.get_world_size()
    rng = np.random.default_rng(args.seed + rank)  # each rank draws its own windows from its own slice
    train_text = np.array_split(corpus.train, world)[rank]
    Tensor.manual_seed(args.seed)
    checkpoint = pathlib.Path(args.checkpoint)
    start_step = 0
    if args.resume:
        cfg, model_state, opt_state, start_step = load_checkpoint(checkpoint)
    else:
        cfg = GPTConfig(corpus.vocab_size, args.context, args.dim, args.heads, args.layers)
    if args.device is not None:
        DEV.value = args.device  # every tensor below is created on Device.DEFAULT
    model = GPT(cfg)
    opt = optim.AdamW(get_parameters(model), lr=args.lr, weight_decay=0.01)
    if args.resume:
        load_state_dict(model, model_state)
        load_state_dict(opt, opt_state)
    if args.data_parallel:
        ddp = DistributedDataParallel(model)  # rank 0's weights to every rank; checks every rank built the same model
    total = start_step + args.steps
    params = sum(p.numel() for p in get_parameters(model))
    if rank == 0:
        print(f"model: {cfg.layers} layers, dim {cfg.dim}, {cfg.heads} heads, context {cfg.context}: {params:,} "
              f"parameters" + (f", data-parallel over {world} ranks" if args.data_parallel else ""))  # fmt: skip
    step = make_step(model, opt, ddp)

    from tqdm import tqdm  # the train extra; imported late so --help works without it

    tokens_per_step = args.batch_size * cfg.context * world  # summed over the ranks
    bar = tqdm(range(start_step, total), desc="train", unit="step", dynamic_ncols=True, mininterval=1.0,
               disable=rank != 0)  # fmt: skip
    begun = time.perf_counter()
    for i in bar:
        opt.lr = cosine_with_warmup(i, total, min(100, total // 10), args.lr, args.lr / 10)
        loss = step(*windows(train_text, args.batch_size, cfg.context, rng)).item()
        elapsed = time.perf_counter() - begun
        bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_step * (i - start_step + 1) / elapsed:,.0f}")
    took = time.perf_counter() - begun
    if rank != 0:  # every rank holds the same weights: rank 0 alone evaluates, samples and saves
        distributed.shutdown()
        return
    if args.steps:
        print(f"trained {args.steps} steps in {took:.1f} s ({tokens_per_step * args.steps / took:,.0f} tokens/s)")

    val = evaluate(model, corpus.val, args.eval_batches, args.batch_size, cfg.context)
    baseline = unigram_loss(corpus.train, corpus.val, corpus.vocab_size)
    print(f"held-out loss {val:.3f} nats/char (unigram baseline {baseline:.3f}) after {total} steps")
    if args.sample:
        forward = TinyJit(lambda ids: model(ids).realize())
        with Tensor.test():
            text = corpus.decode(generate(forward, corpus.encode("def "), args.sample, cfg, 0.8, rng))
        print("sample:\n" + "def " + text)
    save_checkpoint(checkpoint, model, opt, total)
    print(f"saved {checkpoint} (step {total}); continue with --resume")
    if args.data_parallel:
        distributed.shutdown()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    corpus = stdlib_corpus(max_bytes=args.corpus_bytes, seed=0)
    if not args.data_parallel or distributed.init().rank == 0:
        print(f"corpus: {len(corpus.train):,} training and {len(corpus.val):,} held-out characters "
              f"from {len(corpus.train_files)} + {len(corpus.val_files)} stdlib files")  # fmt: skip
    train(args, corpus)


if __name__ == "__main__":
    main()
