"""LLM inference, fusegrad vs torch (2 threads, eager), same random weights: prefill and decode tokens/s of LLaMA-style
models of about 15M and 110M parameters (fp32, batch 1), fusegrad's decode with and without TinyJit, the compiles and
captures over the decoded tokens, and whether greedy decoding picks the same tokens as torch.

Shapes are llama2.c's TinyStories models (15M: dim 288, 6 blocks, 6 heads; 110M: dim 768, 12 blocks, 12 heads; vocab
32000, tied embeddings). Both sides compute the logits of the prompt's last token only. The machine is shared, so the
two run interleaved in one process: prefills alternate (the best of each counts), and decoding alternates in blocks of
steps, each side's tokens/s taken from its median step time (the mean is printed too). At every switch the bench
sleeps SETTLE seconds first, so the other side's OpenMP threads stop spinning (torch's spin for milliseconds after
each call and would share the cores with the side being timed).
Usage: python bench/llm.py [--sizes 15M 110M] [--decode 256] [--prompt 128] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: fusegrad and test.llm.torch_llama

import fusegrad.engine.realize as realize_module
from fusegrad import Tensor, UOp
from fusegrad.llm.model import Transformer, TransformerConfig
from fusegrad.nn.state import get_state_dict, load_state_dict

SIZES = {
    "15M": {"num_blocks": 6, "dim": 288, "hidden_dim": 768, "n_heads": 6},
    "110M": {"num_blocks": 12, "dim": 768, "hidden_dim": 2048, "n_heads": 12},
}
VOCAB = 32000
AGREE_STEPS = 64  # greedy tokens compared with torch
BLOCK = 16  # decode steps each side runs before the other's turn
SETTLE = 0.05  # seconds slept before switching sides


@dataclass
class Side:
    """One system's measurements: prefill seconds per run and seconds per decode step (after the warm-up steps)."""

    prefill: list[float] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    def prefill_rate(self, prompt: int) -> float:
        return prompt / min(self.prefill)

    def decode_rate(self) -> float:
        return 1 / statistics.median(self.steps)

    def decode_mean_rate(self) -> float:
        return len(self.steps) / sum(self.steps)


@dataclass
class Figures:
    """One size's measurements."""

    params: int
    ours: Side = field(default_factory=Side)
    torch: Side = field(default_factory=Side)
    decode_eager: float = 0.0
    compiles_after_first: int = -1
    captures: int = -1
    same_tokens: int = 0


def make_config(size: str, context: int) -> TransformerConfig:
    shape = SIZES[size]
    head_dim = shape["dim"] // shape["n_heads"]
    return TransformerConfig(num_blocks=shape["num_blocks"], dim=shape["dim"], hidden_dim=shape["hidden_dim"],
                             n_heads=shape["n_heads"], n_kv_heads=shape["n_heads"], norm_eps=1e-5, vocab_size=VOCAB,
                             head_dim=head_dim, max_context=context)  # fmt: skip


def random_weights(model: Transformer, seed: int) -> dict[str, np.ndarray]:
    """N(0, 0.02) matrices, norm weights 1, the output tied to the embedding (llama2.c's small models)."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, value in get_state_dict(model).items():
        if name == "output.weight":
            continue
        is_norm = name.endswith("norm.weight")
        weights[name] = (
            np.ones(value.shape, np.float32)
            if is_norm
            else (rng.standard_normal(value.shape) * 0.02).astype(np.float32)
        )
    weights["output.weight"] = weights["token_embd.weight"]
    return weights


def build_fusegrad(cfg: TransformerConfig, weights: dict[str, np.ndarray]) -> Transformer:
    model = Transformer(cfg)
    load_state_dict(
        model, {k: Tensor(v) for k, v in weights.items() if k != "output.weight"}, strict=False, verbose=False
    )
    model.output.weight = model.token_embd.weight  # tied: one tensor
    return model


@contextlib.contextmanager
def count_compiles() -> Iterator[list[int]]:
    """A list that grows by one at every kernel compile inside the block."""
    compiles: list[int] = []
    real = realize_module.get_program

    def counted(ast: Any, renderer: Any) -> Any:
        compiles.append(1)
        return real(ast, renderer)

    realize_module.get_program = counted
    try:
        yield compiles
    finally:
        realize_module.get_program = real


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


class TorchSide:
    """The torch model with greedy steps against its own KV cache (the last position's logits only)."""

    def __init__(self, cfg: TransformerConfig, weights: dict[str, np.ndarray]) -> None:
        import torch

        from test.llm.torch_llama import TorchLlama

        self.torch = torch
        self.model = TorchLlama({k: torch.from_numpy(v) for k, v in weights.items()}, cfg)

    def prefill(self, prompt: list[int]) -> int:
        """Run the prompt from an empty cache; the greedy next token."""
        time.sleep(SETTLE)
        self.model.cache = []
        with self.torch.no_grad():
            return int(self.model.last_logits(self.torch.tensor([prompt]), 0, cached=True)[0].argmax())

    def step(self, token: int, pos: int) -> int:
        with self.torch.no_grad():
            return int(self.model.last_logits(self.torch.tensor([[token]]), pos, cached=True)[0].argmax())


def measure_prefill(model: Transformer, theirs: TorchSide, prompt: list[int], repeats: int, f: Figures) -> None:
    """Alternating runs; fusegrad's first two (they compile, then capture) are warm-up."""
    for _ in range(2):
        model.prefill(prompt, len(prompt)).numpy()
    theirs.prefill(prompt)
    for _ in range(repeats):
        time.sleep(SETTLE)
        f.ours.prefill.append(timed(lambda: model.prefill(prompt, len(prompt)).numpy())[0])
        f.torch.prefill.append(timed(lambda: theirs.prefill(prompt))[0])  # it sleeps SETTLE before the clock starts


def measure_decode(model: Transformer, theirs: TorchSide, prompt: list[int], steps: int, f: Figures) -> None:
    """Greedy decoding, BLOCK steps of fusegrad (through rollout_jit) then BLOCK of torch, until each has `steps`
    tokens. fusegrad's step 0 runs eagerly and step 1 captures: the timed steps start at 2 (torch's too). Compiles
    are counted from step 1 on."""
    position = UOp.variable("start_pos", 1, model.max_context - 1)
    with count_compiles() as compiles:
        ours, mine = int(model.prefill(prompt, len(prompt)).numpy()[0].argmax()), theirs.prefill(prompt)
        captures, after_first = set(), 0
        for block in range(0, steps, BLOCK):
            time.sleep(SETTLE)
            for i in range(block, min(block + BLOCK, steps)):
                f.ours.tokens.append(ours)
                if i == 1:
                    after_first = len(compiles)
                ids, pos = Tensor([[ours]], dtype="int32"), position.bind(len(prompt) + i)
                took, ours = timed(lambda: int(model(ids, pos).numpy()[0].argmax()))  # noqa: B023  # called at once
                f.ours.steps += [took] if i >= 2 else []
                if model.rollout_jit.captured is not None:
                    captures.add(id(model.rollout_jit.captured))
            time.sleep(SETTLE)
            for i in range(block, min(block + BLOCK, steps)):
                f.torch.tokens.append(mine)
                took, mine = timed(lambda: theirs.step(f.torch.tokens[-1], len(prompt) + i))  # noqa: B023
                f.torch.steps += [took] if i >= 2 else []
    f.compiles_after_first, f.captures = len(compiles) - after_first, len(captures)


def measure_eager_decode(model: Transformer, prompt: list[int], steps: int) -> float:
    """Tokens/s of decoding without TinyJit (the plain forward at a bound position), after one warm-up step."""
    logits = model.prefill(prompt, len(prompt))
    position = UOp.variable("start_pos", 1, model.max_context - 1)
    times = []
    for i in range(steps):
        ids = Tensor([[int(logits.numpy()[0].argmax())]], dtype="int32")
        took, logits = timed(lambda: model._forward_realized(ids, position.bind(len(prompt) + i)))  # noqa: B023
        times.append(took)
    return 1 / statistics.median(times[1:])


def measure(size: str, args: argparse.Namespace, prompt: list[int]) -> Figures:
    cfg = make_config(size, len(prompt) + args.decode + 1)
    weights = random_weights(Transformer(cfg), args.seed)
    figures = Figures(sum(v.size for k, v in weights.items() if k != "output.weight"))
    model, theirs = build_fusegrad(cfg, weights), TorchSide(cfg, weights)
    measure_prefill(model, theirs, prompt, args.repeats, figures)
    figures.decode_eager = measure_eager_decode(model, prompt, args.eager_decode)
    measure_decode(model, theirs, prompt, args.decode, figures)
    agree = [a == b for a, b in zip(figures.ours.tokens[:AGREE_STEPS], figures.torch.tokens[:AGREE_STEPS], strict=True)]
    figures.same_tokens = agree.index(False) if False in agree else AGREE_STEPS
    return figures


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES), help="models (default both)")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens for prefill (default 128)")
    parser.add_argument("--decode", type=int, default=256, help="tokens decoded with the JIT (default 256)")
    parser.add_argument("--eager-decode", type=int, default=16, help="tokens decoded without it (default 16)")
    parser.add_argument("--repeats", type=int, default=5, help="prefill runs of each; the best counts (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and prompt (default 0)")
    parser.add_argument("--quick", action="store_true", help="15M only, prompt 32, decode 80, eager 8")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.prompt, args.decode, args.eager_decode = ["15M"], 32, 80, 8
    if args.prompt < 2 or args.decode < AGREE_STEPS or args.eager_decode < 4 or args.repeats < 1:
        parser.error(f"--prompt >= 2, --decode >= {AGREE_STEPS}, --eager-decode >= 4 and --repeats >= 1 are needed")
    return args


def report(size: str, prompt: int, f: Figures) -> None:
    verdict = "same" if f.same_tokens == AGREE_STEPS else f"first {f.same_tokens} same"
    ours, theirs = f.ours, f.torch
    prefill, decode, mean = (
        ours.prefill_rate(prompt) / theirs.prefill_rate(prompt),
        ours.decode_rate() / theirs.decode_rate(),
        ours.decode_mean_rate() / theirs.decode_mean_rate(),
    )
    print(
        f"{size:>5} ({f.params / 1e6:.1f}M params)  prefill {ours.prefill_rate(prompt):7.1f} vs torch "
        f"{theirs.prefill_rate(prompt):7.1f} tok/s ({prefill:.2f}x)  decode jit {ours.decode_rate():6.1f} "
        f"(mean {ours.decode_mean_rate():6.1f}), no jit {f.decode_eager:5.1f} vs torch {theirs.decode_rate():6.1f} "
        f"(mean {theirs.decode_mean_rate():6.1f}) tok/s ({decode:.2f}x, mean {mean:.2f}x)  compiles after step 1: "
        f"{f.compiles_after_first}, captures {f.captures}  greedy {AGREE_STEPS} steps: {verdict}"
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(2)
    print(f"load average {os.getloadavg()[0]:.1f}; prompt {args.prompt}, decode {args.decode} tokens, fp32, batch 1")
    for size in args.sizes:
        prompt = np.random.default_rng(args.seed).integers(0, VOCAB, args.prompt).tolist()
        report(size, args.prompt, measure(size, args, prompt))
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
